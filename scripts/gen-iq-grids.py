#!/usr/bin/env python3
"""Prints the grid code tables of runtime/ggml/IQGridCodes.h from ggml's ggml-common.h.

The IQ2/IQ3/IQ1 grids are part of the file formats (ggml-common.h: iq2xxs_grid, iq2xs_grid, iq2s_grid,
iq3xxs_grid, iq3s_grid, iq1s_grid). Each entry there is a 64-bit (8 values) or 32-bit (4 values) word of bytes
drawn from a few levels; here each entry becomes a 16-bit code of its level indices (element j in bits
b*j..b*j+b-1, b = 2 for 3 levels, 3 for 8 levels), which IQGrids.cpp (CPU) and runtime/cuda/QuantGrid.cuh
(device) expand back at compile time.

Usage: scripts/gen-iq-grids.py path/to/ggml-common.h > codes.inc
"""
import re
import sys

SPECS = [  # ggml table, our name, values per entry, levels, bits per index
    ("iq2xxs_grid", "kIQ2XXSCodes", 8, [8, 25, 43], 2),
    ("iq2xs_grid", "kIQ2XSCodes", 8, [8, 25, 43], 2),
    ("iq2s_grid", "kIQ2SCodes", 8, [8, 25, 43], 2),
    ("iq3xxs_grid", "kIQ3XXSCodes", 4, [4, 12, 20, 28, 36, 44, 52, 62], 3),
    ("iq3s_grid", "kIQ3SCodes", 4, [1, 3, 5, 7, 9, 11, 13, 15], 3),
    ("iq1s_grid", "kIQ1SCodes", 8, [0xff, 0, 1], 2),  # int8 -1, 0, 1
]


def table(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", \w+\)(.*?)GGML_TABLE_END", src, re.S)
    return [int(x, 16) for x in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def main():
    src = open(sys.argv[1]).read()
    for name, ours, width, levels, bits in SPECS:
        codes = []
        for entry in table(src, name):
            code = 0
            for j in range(width):
                code |= levels.index((entry >> (8 * j)) & 0xFF) << (bits * j)
            codes.append(code)
        print(f"inline constexpr uint16_t {ours}[{len(codes)}] = {{")
        for i in range(0, len(codes), 12):
            print("    " + ", ".join(f"0x{c:04x}" for c in codes[i:i + 12]) + ",")
        print("};")


if __name__ == "__main__":
    main()
