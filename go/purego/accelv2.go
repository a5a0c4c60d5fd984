// Package accelv2 loads libaccelerator's v2 (Accel*) ABI the way today's
// hypervisor does: purego, no cgo, dlopen(RTLD_NOW|RTLD_GLOBAL), every
// required symbol looked up (a missing one is an error), structs read
// through Go mirrors of the layouts in ABI-v2.md. The tests in this
// directory drive it against each vendor build.
package accelv2

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Result codes (AccelResult).
const (
	Success            = 0
	ErrInvalidParam    = 1
	ErrNotFound        = 2
	ErrNotSupported    = 3
	ErrExhausted       = 4
	ErrOperationFailed = 5
	ErrInternal        = 6
)

// Topology levels (TopoLevelType).
const (
	TopoInternal = iota
	TopoSingleSwitch
	TopoMultiSwitch
	TopoHostBridge
	TopoNumaNode
	TopoSystem
	TopoSelf
	TopoUnknown
)

// Go mirrors of ABI-v2.md's structs; sizes are asserted in the tests.
type VirtualizationCapabilities struct {
	SupportsPartitioning, SupportsSoftIsolation, SupportsHardIsolation bool
	SupportsSnapshot, SupportsMetrics, SupportsRemoting                bool
	MaxPartitions, MaxWorkersPerDevice                                 uint32
}

type DeviceBasicInfo struct {
	UUID                                [64]byte
	Vendor                              [32]byte
	Model                               [128]byte
	DriverVersion                       [80]byte
	FirmwareVersion                     [64]byte
	DeviceNode                          [64]byte
	Index, NumaNode                     int32
	TotalMemoryBytes, TotalComputeUnits uint64
	MaxTflops                           float64
	PcieGen, PcieWidth                  uint32
}

type DevicePropertyKV struct {
	Key   [64]byte
	Value [256]byte
}

type DeviceProperties struct {
	Properties [64]DevicePropertyKV
	Count      uint64
}

type ExtendedDeviceInfo struct {
	Basic        DeviceBasicInfo
	Props        DeviceProperties
	Capabilities VirtualizationCapabilities
}

type DeviceTopoNode struct {
	PeerUUID             [64]byte
	PeerIndex            int32
	TopoLevel            int32
	BandwidthBytesPerSec int64
}

type DeviceTopologyInfo struct {
	DeviceUUID            [64]byte
	DeviceIndex, NumaNode int32
	Peers                 [64]DeviceTopoNode
	PeerCount             uint64
}

type ExtendedDeviceTopology struct {
	Devices     [64]DeviceTopologyInfo
	DeviceCount uint64
}

type SnapshotContext struct {
	ProcessIDs   *int32
	ProcessCount uint64
	DeviceUUID   *byte
}

type ExtraMetric struct {
	Key   [64]byte
	Value float64
}

type ProcessInformation struct {
	ProcessID                            [32]byte
	DeviceUUID                           [64]byte
	ComputeUtilizationPercent            float64
	ActiveSMs, TotalSMs                  uint64
	MemoryUsedBytes, MemoryReservedBytes uint64
	MemoryUtilizationPercent             float64
}

type DeviceMetrics struct {
	DeviceUUID                    [64]byte
	PowerUsageWatts, TemperatureC float64
	PcieRxBytes, PcieTxBytes      uint64
	UtilizationPercent            uint32
	MemoryUsedBytes               uint64
	ExtraMetrics                  [64]ExtraMetric
	ExtraMetricsCount             uint64
}

type MountPath struct {
	HostPath, GuestPath [512]byte
}

type PartitionResult struct {
	Type        int32
	DeviceUUID  [64]byte
	EnvVars     [16][256]byte
	DeviceNodes [16][1026]byte
}

// Str reads a fixed char[N] field up to its NUL.
func Str(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// Lib is one loaded provider.
type Lib struct {
	handle uintptr

	Init                    func() int32
	Shutdown                func() int32
	GetDeviceCount          func(*uint64) int32
	GetAllDevices           func(*ExtendedDeviceInfo, uint64, *uint64) int32
	GetAllDevicesTopology   func(*ExtendedDeviceTopology) int32
	AssignPartition         func(string, string, *PartitionResult) int32
	RemovePartition         func(string, string) int32
	SetMemHardLimit         func(string, uint64) int32
	SetComputeUnitHardLimit func(string, uint32) int32
	SetComputeUnitRequest   func(string, uint32) int32
	SetWorkerPriority       func(uint32) int32
	Snapshot                func(*SnapshotContext) int32
	Resume                  func(*SnapshotContext) int32
	GetProcessInformation   func(*ProcessInformation, uint64, *uint64) int32
	getDeviceMetrics        func(**byte, uint64, *DeviceMetrics) int32
	GetVendorMountLibs      func(*MountPath, uint64, *uint64) int32
	RegisterLogCallback     func(uintptr) int32 // optional: nil when absent
}

// Open loads path as the hypervisor does and registers the log callback
// before AccelInit; a missing required symbol or a failed init is an error.
func Open(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	l := &Lib{handle: h}
	required := []struct {
		name string
		fn   any
	}{
		{"AccelInit", &l.Init}, {"AccelShutdown", &l.Shutdown},
		{"AccelGetDeviceCount", &l.GetDeviceCount}, {"AccelGetAllDevices", &l.GetAllDevices},
		{"AccelGetAllDevicesTopology", &l.GetAllDevicesTopology},
		{"AccelAssignPartition", &l.AssignPartition}, {"AccelRemovePartition", &l.RemovePartition},
		{"AccelSetMemHardLimit", &l.SetMemHardLimit},
		{"AccelSetComputeUnitHardLimit", &l.SetComputeUnitHardLimit},
		{"AccelSetComputeUnitRequest", &l.SetComputeUnitRequest},
		{"AccelSetWorkerPriority", &l.SetWorkerPriority},
		{"AccelSnapshot", &l.Snapshot}, {"AccelResume", &l.Resume},
		{"AccelGetProcessInformation", &l.GetProcessInformation},
		{"AccelGetDeviceMetrics", &l.getDeviceMetrics},
		{"AccelGetVendorMountLibs", &l.GetVendorMountLibs},
	}
	for _, r := range required {
		sym, err := purego.Dlsym(h, r.name)
		if err != nil {
			purego.Dlclose(h)
			return nil, fmt.Errorf("required symbol %s: %w", r.name, err)
		}
		purego.RegisterFunc(r.fn, sym)
	}
	if sym, err := purego.Dlsym(h, "AccelRegisterLogCallback"); err == nil {
		purego.RegisterFunc(&l.RegisterLogCallback, sym)
		if rc := l.RegisterLogCallback(logCallback()); rc != Success {
			return nil, fmt.Errorf("AccelRegisterLogCallback: %d", rc)
		}
	}
	if rc := l.Init(); rc != Success {
		return nil, fmt.Errorf("AccelInit: %d", rc)
	}
	return l, nil
}

// Close is the hypervisor's order: shutdown, unregister the log callback,
// dlclose.
func (l *Lib) Close() error {
	if rc := l.Shutdown(); rc != Success {
		return fmt.Errorf("AccelShutdown: %d", rc)
	}
	if l.RegisterLogCallback != nil {
		if rc := l.RegisterLogCallback(0); rc != Success {
			return fmt.Errorf("AccelRegisterLogCallback(NULL): %d", rc)
		}
	}
	return purego.Dlclose(l.handle)
}

// GetDeviceMetrics passes the UUIDs as const char** (NUL-terminated copies).
func (l *Lib) GetDeviceMetrics(uuids []string) ([]DeviceMetrics, int32) {
	bufs := make([][]byte, len(uuids))
	ptrs := make([]*byte, len(uuids))
	for i, u := range uuids {
		bufs[i] = append([]byte(u), 0)
		ptrs[i] = &bufs[i][0]
	}
	out := make([]DeviceMetrics, len(uuids))
	var first **byte
	var dst *DeviceMetrics
	if len(uuids) > 0 {
		first, dst = &ptrs[0], &out[0]
	}
	rc := l.getDeviceMetrics(first, uint64(len(uuids)), dst)
	return out, rc
}

// LogLine is one message the library logged.
type LogLine struct{ Level, Message string }

var (
	logMu    sync.Mutex
	logLines []LogLine
	cbOnce   sync.Once
	cbPtr    uintptr
)

func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// logCallback is created once: purego callbacks are never freed, and the
// library is reloaded many times.
func logCallback() uintptr {
	cbOnce.Do(func() {
		cbPtr = purego.NewCallback(func(level, message *byte) {
			line := LogLine{cString(level), cString(message)}
			logMu.Lock()
			logLines = append(logLines, line)
			logMu.Unlock()
		})
	})
	return cbPtr
}

// Logged returns the lines logged so far.
func Logged() []LogLine {
	logMu.Lock()
	defer logMu.Unlock()
	return append([]LogLine(nil), logLines...)
}
