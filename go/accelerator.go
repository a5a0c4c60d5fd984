// Package accelerator is a Go binding of libaccelerator.so's C ABI (see
// ABI.md and accelerator.h), linked through cgo.
//
// The package finds the library with pkg-config (package "accelerator"):
// an installed copy ("make install"), or the in-repo build through
// build/pkgconfig (what "make test-go" uses).
//
// Every function is safe to call from many goroutines. A failed call
// returns an *Error carrying the ABI's Result code and the library's
// reason; errors.Is matches it against ErrInvalidParam, ErrNotFound,
// ErrNotSupported, ErrResourceExhausted, ErrOperationFailed and
// ErrInternal. No C memory outlives a call: results are copied into Go
// values and every C buffer is released before the function returns.
package accelerator

/*
#cgo pkg-config: accelerator
#include <stdlib.h>
#include <accelerator.h>
*/
import "C"

import (
	"runtime"
	"strings"
	"unsafe"
)

// ABIVersion is the ABI version this package was compiled against.
const ABIVersion = uint32(C.ACCELERATOR_ABI_VERSION)

// call runs one ABI call and, on failure, reads the library's last error
// on the same OS thread (the last error is per thread, as with dlerror).
func call(op string, f func() uint32) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := f()
	if r == C.RESULT_SUCCESS {
		return nil
	}
	return &Error{Code: Code(r), Op: op, Message: C.GoString(C.acceleratorGetLastError())}
}

// callBool is call for the functions that return bool: their reason's
// code comes from acceleratorGetLastErrorCode.
func callBool(op string, f func() C.bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if f() {
		return nil
	}
	return &Error{
		Code:    Code(C.acceleratorGetLastErrorCode()),
		Op:      op,
		Message: C.GoString(C.acceleratorGetLastError()),
	}
}

// goString reads a fixed char[N] field up to its first NUL (or N bytes).
func goString(p *C.char, n int) string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(p)), n)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// setFixed copies s into a fixed char[N] field, NUL-terminated.
func setFixed(op, what string, dst *C.char, n int, s string) error {
	if err := checkString(op, what, s); err != nil {
		return err
	}
	if len(s) >= n {
		return invalid(op, what+" is longer than the field it goes in")
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(dst)), n)
	copy(b, s)
	b[len(s)] = 0
	return nil
}

func checkString(op, what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return invalid(op, what+" contains a NUL byte")
	}
	return nil
}

// cstrings is a C array of C strings, released by free.
type cstrings struct {
	arr **C.char
	n   int
}

func newCStrings(op, what string, ss []string) (*cstrings, error) {
	for _, s := range ss {
		if err := checkString(op, what, s); err != nil {
			return nil, err
		}
	}
	cs := &cstrings{n: len(ss)}
	if len(ss) == 0 {
		return cs, nil
	}
	cs.arr = (**C.char)(C.calloc(C.size_t(len(ss)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	if cs.arr == nil {
		return nil, &Error{Code: CodeResourceExhausted, Op: op, Message: op + ": resource exhausted: out of memory"}
	}
	elems := unsafe.Slice(cs.arr, len(ss))
	for i, s := range ss {
		elems[i] = C.CString(s)
	}
	return cs, nil
}

func (cs *cstrings) free() {
	if cs == nil || cs.arr == nil {
		return
	}
	for _, p := range unsafe.Slice(cs.arr, cs.n) {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(cs.arr))
	cs.arr = nil
}

// calloc returns zeroed C memory for n values of T (at least one), or nil.
func calloc[T any](n int) *T {
	if n < 1 {
		n = 1
	}
	var zero T
	return (*T)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(zero))))
}

func oom(op string) error {
	return &Error{Code: CodeResourceExhausted, Op: op, Message: op + ": resource exhausted: out of memory"}
}

// VendorName is the active vendor ("stub", "nvidia", "ascend", "amd").
func VendorName() (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	name := C.GoString(C.acceleratorVendorName())
	if name == "" {
		// No usable vendor; a Result-returning call reports the code.
		var n C.size_t
		r := C.GetDeviceCount(&n)
		msg := C.GoString(C.acceleratorGetLastError())
		code := Code(r)
		if code == CodeSuccess {
			code = CodeInternal
		}
		return "", &Error{Code: code, Op: "acceleratorVendorName", Message: msg}
	}
	return name, nil
}

// LibraryABIVersion is the ABI version of the loaded library.
func LibraryABIVersion() uint32 {
	return uint32(C.acceleratorAbiVersion())
}

// DeviceCount is the number of devices the active vendor has.
func DeviceCount() (int, error) {
	var n C.size_t
	if err := call("GetDeviceCount", func() uint32 { return C.GetDeviceCount(&n) }); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Devices lists every device (GetAllDevices). RelatedDevices is empty
// here: DeviceInfo fills it.
func Devices() ([]Device, error) {
	n, err := DeviceCount()
	if err != nil || n == 0 {
		return []Device{}, err
	}
	buf := calloc[C.ExtendedDeviceInfo](n)
	if buf == nil {
		return nil, oom("GetAllDevices")
	}
	defer C.free(unsafe.Pointer(buf))
	var got C.size_t
	if err := call("GetAllDevices", func() uint32 {
		return C.GetAllDevices(buf, C.size_t(n), &got)
	}); err != nil {
		return nil, err
	}
	if int(got) < n {
		n = int(got)
	}
	out := make([]Device, n)
	for i, d := range unsafe.Slice(buf, n) {
		out[i] = device(&d)
	}
	return out, nil
}

// DeviceInfo describes one device by index, with its related devices
// (getDeviceInfo).
func DeviceInfo(index int) (Device, error) {
	const op = "getDeviceInfo"
	if index < 0 || index > 1<<31-1 {
		return Device{}, invalid(op, "device index out of range")
	}
	info := calloc[C.ExtendedDeviceInfo](1)
	if info == nil {
		return Device{}, oom(op)
	}
	defer C.free(unsafe.Pointer(info))
	if err := call(op, func() uint32 { return C.getDeviceInfo(C.int32_t(index), info) }); err != nil {
		return Device{}, err
	}
	defer C.freeExtendedDeviceInfo(info)
	d := device(info)
	for _, r := range unsafe.Slice(info.relatedDevices, int(info.relatedDeviceCount)) {
		d.RelatedDevices = append(d.RelatedDevices, related(&r))
	}
	return d, nil
}

// PartitionTemplates lists a device's partition templates
// (GetPartitionTemplates).
func PartitionTemplates(deviceIndex int) ([]PartitionTemplate, error) {
	const op = "GetPartitionTemplates"
	if deviceIndex < 0 || deviceIndex > 1<<31-1 {
		return nil, invalid(op, "device index out of range")
	}
	return growingList(op,
		func(buf *C.PartitionTemplate, capacity C.size_t, got *C.size_t) uint32 {
			return C.GetPartitionTemplates(C.int32_t(deviceIndex), buf, capacity, got)
		}, template)
}

// Topology describes how the given devices (all of them when none are
// given) connect (getDeviceTopology).
func Topology(deviceIndices ...int) (DeviceTopologyInfo, error) {
	const op = "getDeviceTopology"
	if len(deviceIndices) == 0 {
		n, err := DeviceCount()
		if err != nil {
			return DeviceTopologyInfo{}, err
		}
		for i := 0; i < n; i++ {
			deviceIndices = append(deviceIndices, i)
		}
	}
	if len(deviceIndices) == 0 {
		return DeviceTopologyInfo{Devices: []DeviceTopology{}}, nil
	}
	idx := calloc[C.int32_t](len(deviceIndices))
	topo := calloc[C.ExtendedDeviceTopology](1)
	defer C.free(unsafe.Pointer(idx))
	defer C.free(unsafe.Pointer(topo))
	if idx == nil || topo == nil {
		return DeviceTopologyInfo{}, oom(op)
	}
	for i, v := range deviceIndices {
		if v < 0 || v > 1<<31-1 {
			return DeviceTopologyInfo{}, invalid(op, "device index out of range")
		}
		unsafe.Slice(idx, len(deviceIndices))[i] = C.int32_t(v)
	}
	if err := call(op, func() uint32 {
		return C.getDeviceTopology(idx, C.size_t(len(deviceIndices)), topo)
	}); err != nil {
		return DeviceTopologyInfo{}, err
	}
	defer C.freeExtendedDeviceTopology(topo)
	out := DeviceTopologyInfo{
		TopologyType:        goString(&topo.topologyType[0], len(topo.topologyType)),
		NVLinkBandwidthMBps: uint32(topo.nvlinkBandwidthMBps),
		IBNICCount:          uint32(topo.ibNicCount),
		Devices:             make([]DeviceTopology, 0, int(topo.deviceCount)),
	}
	for _, d := range unsafe.Slice(topo.devices, int(topo.deviceCount)) {
		t := DeviceTopology{
			DeviceUUID:  goString(&d.deviceUUID[0], len(d.deviceUUID)),
			NUMANode:    int(d.numaNode),
			Connections: make([]RelatedDevice, 0, int(d.connectionCount)),
		}
		for _, c := range unsafe.Slice(d.connections, int(d.connectionCount)) {
			t.Connections = append(t.Connections, related(&c))
		}
		out.Devices = append(out.Devices, t)
	}
	return out, nil
}

// AssignPartition carves a partition of templateID out of a device.
func AssignPartition(templateID, deviceUUID string) (Partition, error) {
	const op = "AssignPartition"
	a := calloc[C.PartitionAssignment](1)
	if a == nil {
		return Partition{}, oom(op)
	}
	defer C.free(unsafe.Pointer(a))
	if err := setFixed(op, "templateId", &a.templateId[0], len(a.templateId), templateID); err != nil {
		return Partition{}, err
	}
	if err := setFixed(op, "deviceUUID", &a.deviceUUID[0], len(a.deviceUUID), deviceUUID); err != nil {
		return Partition{}, err
	}
	if err := callBool(op, func() C.bool { return C.AssignPartition(a) }); err != nil {
		return Partition{}, err
	}
	return Partition{
		TemplateID:    templateID,
		DeviceUUID:    deviceUUID,
		PartitionUUID: goString(&a.partitionUUID[0], len(a.partitionUUID)),
		OverheadBytes: uint64(a.partitionOverheadBytes),
	}, nil
}

// RemovePartition removes a partition, named by its UUID or by its
// template (the template's newest partition on the device).
func RemovePartition(templateOrPartitionID, deviceUUID string) error {
	const op = "RemovePartition"
	args, err := newCStrings(op, "argument", []string{templateOrPartitionID, deviceUUID})
	if err != nil {
		return err
	}
	defer args.free()
	s := unsafe.Slice(args.arr, 2)
	return callBool(op, func() C.bool { return C.RemovePartition(s[0], s[1]) })
}

// withStrings calls f with the C copies of strs (op names the call in errors).
func withStrings(op string, strs []string, f func([]*C.char) uint32) error {
	args, err := newCStrings(op, "argument", strs)
	if err != nil {
		return err
	}
	defer args.free()
	s := unsafe.Slice(args.arr, len(strs))
	return call(op, func() uint32 { return f(s) })
}

// SetMemHardLimit caps a worker's device memory, once per worker and device.
func SetMemHardLimit(workerID, deviceUUID string, memoryLimitBytes uint64) error {
	return withStrings("SetMemHardLimit", []string{workerID, deviceUUID}, func(s []*C.char) uint32 {
		return C.SetMemHardLimit(s[0], s[1], C.uint64_t(memoryLimitBytes))
	})
}

// SetComputeUnitHardLimit caps a worker's compute share (percent, 1–100),
// once per worker and device.
func SetComputeUnitHardLimit(workerID, deviceUUID string, percent uint32) error {
	return withStrings("SetComputeUnitHardLimit", []string{workerID, deviceUUID}, func(s []*C.char) uint32 {
		return C.SetComputeUnitHardLimit(s[0], s[1], C.uint32_t(percent))
	})
}

// SetComputeUnitRequest sets the share of a device (percent, 0–100; 0 =
// best-effort) a worker is to be guaranteed whenever it wants it, never above
// its hard limit there. It may be set again. The host's sampler schedules the
// device's launches by it (docs/compute.md, "Soft mode").
func SetComputeUnitRequest(workerID, deviceUUID string, percent uint32) error {
	return withStrings("SetComputeUnitRequest", []string{workerID, deviceUUID}, func(s []*C.char) uint32 {
		return C.SetComputeUnitRequest(s[0], s[1], C.uint32_t(percent))
	})
}

// SetWorkerPriority sets a worker's priority (1–100, higher first; 50 when
// never set). It may be set again. The host's sampler schedules launches by it
// where the worker shares a device (docs/compute.md, "Soft mode").
func SetWorkerPriority(workerID string, priority uint32) error {
	return withStrings("SetWorkerPriority", []string{workerID}, func(s []*C.char) uint32 {
		return C.SetWorkerPriority(s[0], C.uint32_t(priority))
	})
}

func processArray(op, deviceUUID string, pids []int, f func(*C.ProcessArray) uint32) error {
	pa := calloc[C.ProcessArray](1)
	if pa == nil {
		return oom(op)
	}
	defer C.free(unsafe.Pointer(pa))
	if err := setFixed(op, "deviceUUID", &pa.deviceUUID[0], len(pa.deviceUUID), deviceUUID); err != nil {
		return err
	}
	if len(pids) > 0 {
		pa.processIds = calloc[C.pid_t](len(pids))
		if pa.processIds == nil {
			return oom(op)
		}
		defer C.free(unsafe.Pointer(pa.processIds))
		for i, p := range pids {
			if p < -1<<31 || p > 1<<31-1 {
				return invalid(op, "process id out of range")
			}
			unsafe.Slice(pa.processIds, len(pids))[i] = C.pid_t(p)
		}
	}
	pa.processCount = C.size_t(len(pids))
	return call(op, func() uint32 { return f(pa) })
}

// Snapshot checkpoints (and locks) the device state of the processes.
func Snapshot(deviceUUID string, pids ...int) error {
	return processArray("Snapshot", deviceUUID, pids, func(p *C.ProcessArray) uint32 {
		return C.Snapshot(p)
	})
}

// Resume restores (and unlocks) what Snapshot saved.
func Resume(deviceUUID string, pids ...int) error {
	return processArray("Resume", deviceUUID, pids, func(p *C.ProcessArray) uint32 {
		return C.Resume(p)
	})
}

// ProcessComputeUtilization lists every tracked process's compute use on
// every device (GetProcessComputeUtilization).
func ProcessComputeUtilization() ([]ComputeUtilization, error) {
	return growingList("GetProcessComputeUtilization",
		func(buf *C.ComputeUtilization, capacity C.size_t, got *C.size_t) uint32 {
			return C.GetProcessComputeUtilization(buf, capacity, got)
		}, compute)
}

// ProcessMemoryUtilization lists every tracked process's memory use on
// every device (GetProcessMemoryUtilization).
func ProcessMemoryUtilization() ([]MemoryUtilization, error) {
	return growingList("GetProcessMemoryUtilization",
		func(buf *C.MemoryUtilization, capacity C.size_t, got *C.size_t) uint32 {
			return C.GetProcessMemoryUtilization(buf, capacity, got)
		}, memory)
}

// growingList calls a caller-allocated list function with a buffer that
// doubles until the whole list fits (a full buffer may mean truncation).
func growingList[CT, T any](op string, fill func(*CT, C.size_t, *C.size_t) uint32,
	conv func(*CT) T) ([]T, error) {
	for capacity := 64; ; capacity *= 2 {
		buf := calloc[CT](capacity)
		if buf == nil {
			return nil, oom(op)
		}
		var got C.size_t
		err := call(op, func() uint32 { return fill(buf, C.size_t(capacity), &got) })
		if err != nil || int(got) < capacity {
			var out []T
			if err == nil {
				items := unsafe.Slice(buf, int(got))
				out = make([]T, len(items))
				for i := range items {
					out[i] = conv(&items[i])
				}
			}
			C.free(unsafe.Pointer(buf))
			return out, err
		}
		C.free(unsafe.Pointer(buf))
	}
}

// ProcessComputeUtilizationOf reports the named processes (and every
// process the library tracks) on the given devices
// (getProcessComputeUtilization). Both lists must be non-empty.
func ProcessComputeUtilizationOf(deviceUUIDs, processIDs []string) ([]ComputeUtilization, error) {
	return processUsageOf("getProcessComputeUtilization", deviceUUIDs, processIDs,
		func(devs, pids *cstrings, p **C.ComputeUtilization, n *C.size_t) uint32 {
			return C.getProcessComputeUtilization(devs.arr, C.size_t(devs.n), pids.arr, C.size_t(pids.n), p, n)
		},
		func(p *C.ComputeUtilization, n C.size_t) { C.freeComputeUtilizations(p, n) },
		compute)
}

// ProcessMemoryUtilizationOf is ProcessComputeUtilizationOf for memory
// (getProcessMemoryUtilization).
func ProcessMemoryUtilizationOf(deviceUUIDs, processIDs []string) ([]MemoryUtilization, error) {
	return processUsageOf("getProcessMemoryUtilization", deviceUUIDs, processIDs,
		func(devs, pids *cstrings, p **C.MemoryUtilization, n *C.size_t) uint32 {
			return C.getProcessMemoryUtilization(devs.arr, C.size_t(devs.n), pids.arr, C.size_t(pids.n), p, n)
		},
		func(p *C.MemoryUtilization, n C.size_t) { C.freeMemoryUtilizations(p, n) },
		memory)
}

// processUsageOf runs one of the two library-allocated per-process
// queries: C strings in, the library's array converted and freed.
func processUsageOf[CT, T any](op string, deviceUUIDs, processIDs []string,
	get func(devs, pids *cstrings, p **CT, n *C.size_t) uint32,
	free func(*CT, C.size_t), conv func(*CT) T) ([]T, error) {
	devs, err := newCStrings(op, "deviceUUIDs", deviceUUIDs)
	if err != nil {
		return nil, err
	}
	defer devs.free()
	pids, err := newCStrings(op, "processIds", processIDs)
	if err != nil {
		return nil, err
	}
	defer pids.free()
	var p *CT
	var n C.size_t
	if err := call(op, func() uint32 { return get(devs, pids, &p, &n) }); err != nil {
		return nil, err
	}
	defer free(p, n)
	items := unsafe.Slice(p, int(n))
	out := make([]T, len(items))
	for i := range items {
		out[i] = conv(&items[i])
	}
	return out, nil
}

// allUUIDs is the UUID of every device, for the functions whose list of
// devices may be left out.
func allUUIDs(uuids []string) ([]string, error) {
	if len(uuids) > 0 {
		return uuids, nil
	}
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
	}
	return uuids, nil
}

// DeviceMetrics samples the given devices (every device when none are
// given), in the order given (GetDeviceMetrics).
func DeviceMetrics(deviceUUIDs ...string) ([]Metrics, error) {
	const op = "GetDeviceMetrics"
	uuids, err := allUUIDs(deviceUUIDs)
	if err != nil || len(uuids) == 0 {
		return []Metrics{}, err
	}
	arr, err := newCStrings(op, "deviceUUIDs", uuids)
	if err != nil {
		return nil, err
	}
	defer arr.free()
	buf := calloc[C.DeviceMetrics](len(uuids))
	if buf == nil {
		return nil, oom(op)
	}
	defer C.free(unsafe.Pointer(buf))
	if err := call(op, func() uint32 {
		return C.GetDeviceMetrics(arr.arr, C.size_t(len(uuids)), buf)
	}); err != nil {
		return nil, err
	}
	out := make([]Metrics, len(uuids))
	for i, m := range unsafe.Slice(buf, len(uuids)) {
		out[i] = metrics(&m)
	}
	return out, nil
}

// ExtendedDeviceMetrics samples the given devices' per-link bandwidths
// (every device when none are given) (getExtendedDeviceMetrics).
func ExtendedDeviceMetrics(deviceUUIDs ...string) ([]ExtendedMetrics, error) {
	const op = "getExtendedDeviceMetrics"
	uuids, err := allUUIDs(deviceUUIDs)
	if err != nil || len(uuids) == 0 {
		return []ExtendedMetrics{}, err
	}
	arr, err := newCStrings(op, "deviceUUIDs", uuids)
	if err != nil {
		return nil, err
	}
	defer arr.free()
	var p *C.ExtendedDeviceMetrics
	if err := call(op, func() uint32 {
		return C.getExtendedDeviceMetrics(arr.arr, C.size_t(len(uuids)), &p)
	}); err != nil {
		return nil, err
	}
	defer C.freeExtendedDeviceMetrics(p, C.size_t(len(uuids)))
	out := make([]ExtendedMetrics, len(uuids))
	for i, m := range unsafe.Slice(p, len(uuids)) {
		out[i] = ExtendedMetrics{
			DeviceUUID:          goString(&m.deviceUUID[0], len(m.deviceUUID)),
			NVLinkBandwidthMBps: make([]uint32, 0, int(m.nvlinkCount)),
			IBNICBandwidthMBps:  make([]uint64, 0, int(m.ibNicCount)),
			PCIeBandwidthMBps:   make([]uint32, 0, int(m.pcieLinkCount)),
		}
		for _, v := range unsafe.Slice(m.nvlinkBandwidthMBps, int(m.nvlinkCount)) {
			out[i].NVLinkBandwidthMBps = append(out[i].NVLinkBandwidthMBps, uint32(v))
		}
		for _, v := range unsafe.Slice(m.ibNicBandwidthMBps, int(m.ibNicCount)) {
			out[i].IBNICBandwidthMBps = append(out[i].IBNICBandwidthMBps, uint64(v))
		}
		for _, v := range unsafe.Slice(m.pcieBandwidthMBps, int(m.pcieLinkCount)) {
			out[i].PCIeBandwidthMBps = append(out[i].PCIeBandwidthMBps, uint32(v))
		}
	}
	return out, nil
}
