// A deliberate layering violation for the `layering-finds-leaks` test: a pass including the emitter.
// Never compiled.
#include "compiler/emit/LocalShapes.h"
