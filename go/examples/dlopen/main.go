// Command dlopen loads libaccelerator.so from a path given at run time, as
// the hypervisor does (dlopen + dlsym, no link-time dependency), and lists
// the devices and their metrics.
//
//	dlopen [-repeat N] /path/to/libaccelerator.so
//
// -repeat loads, uses and unloads (dlclose) the library N times.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../../include
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <accelerator.h>

// The functions this program resolves, typed from the header.
typedef struct {
	void *handle;
	__typeof__(&GetDeviceCount) GetDeviceCount;
	__typeof__(&GetAllDevices) GetAllDevices;
	__typeof__(&GetDeviceMetrics) GetDeviceMetrics;
	__typeof__(&acceleratorGetLastError) acceleratorGetLastError;
	__typeof__(&acceleratorVendorName) acceleratorVendorName;
	__typeof__(&acceleratorAbiVersion) acceleratorAbiVersion;
} accel_lib;

// Loads path into lib; on failure returns the reason (static storage).
static const char *accel_open(const char *path, accel_lib *lib) {
	lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib->handle)
		return dlerror();
#define RESOLVE(name)                                                  \
	lib->name = (__typeof__(lib->name))dlsym(lib->handle, #name);      \
	if (!lib->name) {                                                  \
		static char why[256];                                          \
		snprintf(why, sizeof why, "%s: missing symbol %s", path, #name); \
		dlclose(lib->handle);                                          \
		lib->handle = NULL;                                            \
		return why;                                                    \
	}
	RESOLVE(GetDeviceCount)
	RESOLVE(GetAllDevices)
	RESOLVE(GetDeviceMetrics)
	RESOLVE(acceleratorGetLastError)
	RESOLVE(acceleratorVendorName)
	RESOLVE(acceleratorAbiVersion)
#undef RESOLVE
	return NULL;
}

static void accel_close(accel_lib *lib) {
	if (lib->handle)
		dlclose(lib->handle);
	lib->handle = NULL;
}

// cgo cannot call through function pointers: one trampoline each.
static Result accel_GetDeviceCount(accel_lib *l, size_t *n) { return l->GetDeviceCount(n); }
static Result accel_GetAllDevices(accel_lib *l, ExtendedDeviceInfo *d, size_t max, size_t *n) {
	return l->GetAllDevices(d, max, n);
}
static Result accel_GetDeviceMetrics(accel_lib *l, const char **uuids, size_t n, DeviceMetrics *m) {
	return l->GetDeviceMetrics(uuids, n, m);
}
static const char *accel_lastError(accel_lib *l) { return l->acceleratorGetLastError(); }
static const char *accel_vendorName(accel_lib *l) { return l->acceleratorVendorName(); }
static uint32_t accel_abiVersion(accel_lib *l) { return l->acceleratorAbiVersion(); }
*/
import "C"

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"
)

var resultNames = []string{
	"RESULT_SUCCESS", "RESULT_ERROR_INVALID_PARAM", "RESULT_ERROR_NOT_FOUND",
	"RESULT_ERROR_NOT_SUPPORTED", "RESULT_ERROR_RESOURCE_EXHAUSTED",
	"RESULT_ERROR_OPERATION_FAILED", "RESULT_ERROR_INTERNAL",
}

type library struct{ l *C.accel_lib }

func open(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	l := (*C.accel_lib)(C.calloc(1, C.size_t(unsafe.Sizeof(C.accel_lib{}))))
	if l == nil {
		return nil, fmt.Errorf("out of memory")
	}
	runtime.LockOSThread() // dlerror is per thread
	why := C.accel_open(cpath, l)
	var err error
	if why != nil {
		err = fmt.Errorf("cannot load %s: %s", path, C.GoString(why))
	}
	runtime.UnlockOSThread()
	if err != nil {
		C.free(unsafe.Pointer(l))
		return nil, err
	}
	return &library{l}, nil
}

func (lib *library) close() {
	C.accel_close(lib.l)
	C.free(unsafe.Pointer(lib.l))
	lib.l = nil
}

// call runs f and reads the library's last error on the same OS thread.
func (lib *library) call(op string, f func() uint32) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := f()
	if r == 0 {
		return nil
	}
	name := "RESULT_UNKNOWN"
	if int(r) < len(resultNames) {
		name = resultNames[r]
	}
	return fmt.Errorf("%s failed: %s (%d): %s", op, name, r, C.GoString(C.accel_lastError(lib.l)))
}

func fixed(p *C.char, n int) string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(p)), n)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func list(w io.Writer, lib *library) error {
	var vendor string
	var abi uint32
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		vendor = C.GoString(C.accel_vendorName(lib.l))
		abi = uint32(C.accel_abiVersion(lib.l))
	}()
	var n C.size_t
	if err := lib.call("GetDeviceCount", func() uint32 { return uint32(C.accel_GetDeviceCount(lib.l, &n)) }); err != nil {
		return err
	}
	fmt.Fprintf(w, "vendor %s, ABI version %d, %d device(s)\n", vendor, abi, n)
	if n == 0 {
		return nil
	}
	devs := (*C.ExtendedDeviceInfo)(C.calloc(n, C.size_t(unsafe.Sizeof(C.ExtendedDeviceInfo{}))))
	uuids := (**C.char)(C.calloc(n, C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	metrics := (*C.DeviceMetrics)(C.calloc(n, C.size_t(unsafe.Sizeof(C.DeviceMetrics{}))))
	defer C.free(unsafe.Pointer(devs))
	defer C.free(unsafe.Pointer(uuids))
	defer C.free(unsafe.Pointer(metrics))
	if devs == nil || uuids == nil || metrics == nil {
		return fmt.Errorf("out of memory")
	}
	var got C.size_t
	if err := lib.call("GetAllDevices", func() uint32 {
		return uint32(C.accel_GetAllDevices(lib.l, devs, n, &got))
	}); err != nil {
		return err
	}
	ds := unsafe.Slice(devs, int(got))
	us := unsafe.Slice(uuids, int(got))
	fmt.Fprintf(w, "%-5s %-20s %-8s %-24s %14s %6s %8s\n", "INDEX", "UUID", "VENDOR", "MODEL", "MEMORY", "CUS", "TFLOPS")
	for i := range ds {
		b := &ds[i].basic
		b.uuid[len(b.uuid)-1] = 0
		us[i] = &b.uuid[0]
		fmt.Fprintf(w, "%-5d %-20s %-8s %-24s %14d %6d %8.1f\n", int(b.index),
			fixed(&b.uuid[0], len(b.uuid)), fixed(&b.vendor[0], len(b.vendor)),
			fixed(&b.model[0], len(b.model)), uint64(b.totalMemoryBytes),
			uint64(b.totalComputeUnits), float64(b.maxTflops))
	}
	if err := lib.call("GetDeviceMetrics", func() uint32 {
		return uint32(C.accel_GetDeviceMetrics(lib.l, uuids, got, metrics))
	}); err != nil {
		return err
	}
	fmt.Fprintf(w, "%-20s %9s %7s %5s %14s %14s\n", "DEVICE", "POWER_W", "TEMP_C", "SM%", "MEM_USED", "MEM_TOTAL")
	for _, m := range unsafe.Slice(metrics, int(got)) {
		fmt.Fprintf(w, "%-20s %9.1f %7.1f %5d %14d %14d\n", fixed(&m.deviceUUID[0], len(m.deviceUUID)),
			float64(m.powerUsageWatts), float64(m.temperatureCelsius), uint32(m.smActivePercent),
			uint64(m.memoryUsedBytes), uint64(m.memoryTotalBytes))
	}
	return nil
}

func main() {
	repeat := flag.Int("repeat", 1, "load, list and unload the library this many times")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: dlopen [-repeat N] /path/to/libaccelerator.so")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *repeat < 1 {
		flag.Usage()
		os.Exit(2)
	}
	for i := 0; i < *repeat; i++ {
		lib, err := open(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "dlopen:", err)
			os.Exit(1)
		}
		err = list(os.Stdout, lib)
		lib.close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "dlopen:", err)
			os.Exit(1)
		}
	}
}
