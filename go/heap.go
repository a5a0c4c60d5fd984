package accelerator

/*
#include <malloc.h>

static size_t accelerator_go_heap_in_use(void) {
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}
*/
import "C"

// cHeapInUse is the C heap's bytes in use (glibc mallinfo2): the tests
// check that calls leave no C memory behind.
func cHeapInUse() uint64 {
	return uint64(C.accelerator_go_heap_in_use())
}
