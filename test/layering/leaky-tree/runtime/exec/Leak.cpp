// A deliberate layering violation for the `layering-finds-leaks` test: the backend-neutral executor
// including the CPU backend. Never compiled.
#include "runtime/cpu/CpuSession.h"
