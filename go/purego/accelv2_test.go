package accelv2

import (
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// The library and what to expect of it, from the environment
// (c-tests/v2/v2.mk runs this once per vendor):
//
//	ACCEL_V2_LIB       the library (default: $ACCELERATOR_LIB, the stub build)
//	ACCEL_V2_VENDOR    stub | nvidia | ascend | amd (default stub)
//	ACCEL_V2_TEMPLATE  a partition template of device 0 (default the stub's;
//	                   "-" for a vendor without partitions, Habana)
func config(t *testing.T) (lib, vendor, template string) {
	lib = os.Getenv("ACCEL_V2_LIB")
	if lib == "" {
		lib = os.Getenv("ACCELERATOR_LIB")
	}
	if lib == "" {
		t.Fatal("set ACCEL_V2_LIB (or ACCELERATOR_LIB) to a libaccelerator build: make test-v2-go does")
	}
	vendor, template = os.Getenv("ACCEL_V2_VENDOR"), os.Getenv("ACCEL_V2_TEMPLATE")
	if vendor == "" {
		vendor, template = "stub", "mig-1g.7gb"
	}
	return lib, vendor, template
}

func TestMain(m *testing.M) {
	if os.Getenv("ACCELERATOR_STATE_DIR") == "" {
		dir, err := os.MkdirTemp("", "accelv2-state")
		if err != nil {
			panic(err)
		}
		os.Setenv("ACCELERATOR_STATE_DIR", dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestLayouts(t *testing.T) {
	sizes := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"VirtualizationCapabilities", unsafe.Sizeof(VirtualizationCapabilities{}), 16},
		{"DeviceBasicInfo", unsafe.Sizeof(DeviceBasicInfo{}), 472},
		{"DevicePropertyKV", unsafe.Sizeof(DevicePropertyKV{}), 320},
		{"DeviceProperties", unsafe.Sizeof(DeviceProperties{}), 20488},
		{"ExtendedDeviceInfo", unsafe.Sizeof(ExtendedDeviceInfo{}), 20976},
		{"DeviceTopoNode", unsafe.Sizeof(DeviceTopoNode{}), 80},
		{"DeviceTopologyInfo", unsafe.Sizeof(DeviceTopologyInfo{}), 5200},
		{"ExtendedDeviceTopology", unsafe.Sizeof(ExtendedDeviceTopology{}), 332808},
		{"SnapshotContext", unsafe.Sizeof(SnapshotContext{}), 24},
		{"ExtraMetric", unsafe.Sizeof(ExtraMetric{}), 72},
		{"ProcessInformation", unsafe.Sizeof(ProcessInformation{}), 144},
		{"DeviceMetrics", unsafe.Sizeof(DeviceMetrics{}), 4728},
		{"MountPath", unsafe.Sizeof(MountPath{}), 1024},
		{"PartitionResult", unsafe.Sizeof(PartitionResult{}), 20580},
		{"ExtendedDeviceInfo.Capabilities", unsafe.Offsetof(ExtendedDeviceInfo{}.Capabilities), 20960},
		{"DeviceBasicInfo.DeviceNode", unsafe.Offsetof(DeviceBasicInfo{}.DeviceNode), 368},
		{"DeviceTopologyInfo.PeerCount", unsafe.Offsetof(DeviceTopologyInfo{}.PeerCount), 5192},
		{"ExtendedDeviceTopology.DeviceCount", unsafe.Offsetof(ExtendedDeviceTopology{}.DeviceCount), 332800},
		{"DeviceMetrics.UtilizationPercent", unsafe.Offsetof(DeviceMetrics{}.UtilizationPercent), 96},
		{"DeviceMetrics.ExtraMetricsCount", unsafe.Offsetof(DeviceMetrics{}.ExtraMetricsCount), 4720},
		{"PartitionResult.DeviceNodes", unsafe.Offsetof(PartitionResult{}.DeviceNodes), 4164},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("%s: %d, want %d", s.name, s.got, s.want)
		}
	}
}

// discover is the hypervisor's discovery: count, then min(count, 64) devices.
func discover(t *testing.T, l *Lib) []ExtendedDeviceInfo {
	var n uint64
	if rc := l.GetDeviceCount(&n); rc != Success || n == 0 {
		t.Fatalf("AccelGetDeviceCount: rc %d, %d devices", rc, n)
	}
	devs := make([]ExtendedDeviceInfo, min(n, 64))
	var got uint64
	if rc := l.GetAllDevices(&devs[0], uint64(len(devs)), &got); rc != Success || got != uint64(len(devs)) {
		t.Fatalf("AccelGetAllDevices: rc %d, %d of %d", rc, got, len(devs))
	}
	return devs
}

// assign assigns `template` on dev0 and returns the partition's UUID; for a
// vendor without partitions ("-"), checks the refusal and returns a UUID
// that names nothing.
func assign(t *testing.T, l *Lib, vendor, template, dev0 string) string {
	var pr PartitionResult
	if template == "-" {
		if rc := l.AssignPartition(template, dev0, &pr); rc != ErrNotSupported {
			t.Errorf("AccelAssignPartition on %s: %d, want not supported", vendor, rc)
		}
		return vendor + "-no-partition"
	}
	if rc := l.AssignPartition(template, dev0, &pr); rc != Success {
		t.Fatalf("AccelAssignPartition(%s, %s): %d", template, dev0, rc)
	}
	part := strings.ToLower(Str(pr.DeviceUUID[:]))
	env := strings.ToLower(Str(pr.EnvVars[0][:]))
	// Ascend and AMD name the device (vNPU number, GPU index) in the
	// environment, not the partition's UUID.
	namesPart := vendor != "ascend" && vendor != "amd"
	if part == "" || !strings.Contains(env, "=") || namesPart && !strings.HasSuffix(env, part) {
		t.Errorf("partition %q env %q", part, env)
	}
	return part
}

func TestHypervisorFlow(t *testing.T) {
	path, vendor, template := config(t)
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	devs := discover(t, l)
	uuids := make([]string, len(devs))
	for i := range devs {
		uuids[i] = strings.ToLower(Str(devs[i].Basic.UUID[:]))
		if Str(devs[i].Basic.UUID[:]) == "" || devs[i].Props.Count == 0 {
			t.Errorf("device %d: uuid %q, %d properties", i, uuids[i], devs[i].Props.Count)
		}
	}
	t.Logf("%s: %d devices", vendor, len(devs))

	// Topology, read as the hypervisor does: skip empty, self and SELF peers.
	topo := new(ExtendedDeviceTopology)
	if rc := l.GetAllDevicesTopology(topo); rc != Success {
		t.Fatalf("AccelGetAllDevicesTopology: %d", rc)
	}
	if topo.DeviceCount != uint64(len(devs)) {
		t.Fatalf("topology: %d rows for %d devices", topo.DeviceCount, len(devs))
	}
	for i := uint64(0); i < topo.DeviceCount; i++ {
		row := &topo.Devices[i]
		own := Str(row.DeviceUUID[:])
		for k := uint64(0); k < row.PeerCount; k++ {
			p := row.Peers[k]
			peer := Str(p.PeerUUID[:])
			if peer == "" || peer == own || p.TopoLevel == TopoSelf || p.TopoLevel > TopoUnknown {
				t.Errorf("row %d peer %d: %q level %d", i, k, peer, p.TopoLevel)
			}
			if vendor != "ascend" && (p.TopoLevel != TopoInternal || p.BandwidthBytesPerSec <= 0) {
				t.Errorf("row %d peer %d: NVLink expected, level %d bw %d", i, k, p.TopoLevel, p.BandwidthBytesPerSec)
			}
		}
		want := uint64(len(devs) - 1)
		if vendor == "habana" { // HLML names no link
			want = 0
		}
		if vendor != "ascend" && row.PeerCount != want {
			t.Errorf("row %d: %d peers", i, row.PeerCount)
		}
	}

	// Allocation: assign, mount list; then removal by the partition UUID.
	// Every UUID goes back lowercased, as the hypervisor keeps them.
	dev0 := uuids[0]
	part := assign(t, l, vendor, template, dev0)
	mounts := make([]MountPath, 64)
	var nm uint64
	if rc := l.GetVendorMountLibs(&mounts[0], 64, &nm); rc != Success {
		t.Errorf("AccelGetVendorMountLibs: %d", rc)
	}
	if vendor != "stub" && nm == 0 {
		t.Errorf("%s: no driver libraries to mount", vendor)
	}
	if rc := l.RemovePartition(part, dev0); template != "-" && rc != Success {
		t.Fatalf("AccelRemovePartition(%s): %d", part, rc)
	}

	// Metrics: the removed partition's UUID among live devices fails nothing.
	batch := append(append([]string{}, uuids...), part)
	ms, rc := l.GetDeviceMetrics(batch)
	if rc != Success {
		t.Fatalf("AccelGetDeviceMetrics: %d", rc)
	}
	for i, m := range ms {
		if !strings.EqualFold(Str(m.DeviceUUID[:]), batch[i]) {
			t.Errorf("metrics[%d] answers %q, not %q", i, Str(m.DeviceUUID[:]), batch[i])
		}
	}
	if last := ms[len(ms)-1]; last.PowerUsageWatts != 0 || last.MemoryUsedBytes != 0 || last.ExtraMetricsCount != 0 {
		t.Errorf("removed partition: %+v", last)
	}
	if ms[0].TemperatureC <= 0 {
		t.Errorf("device 0: temperature %v", ms[0].TemperatureC)
	}

	// Limits bind the calling process's worker.
	os.Setenv("ACCELERATOR_WORKER_ID", "purego-"+vendor)
	if rc := l.SetMemHardLimit(dev0, devs[0].Basic.TotalMemoryBytes/2); rc != Success {
		t.Errorf("AccelSetMemHardLimit: %d", rc)
	}
	if rc := l.SetComputeUnitHardLimit(dev0, 50); rc != Success {
		t.Errorf("AccelSetComputeUnitHardLimit: %d", rc)
	}
	if rc := l.SetComputeUnitRequest(dev0, 30); rc != Success {
		t.Errorf("AccelSetComputeUnitRequest: %d", rc)
	}
	if rc := l.SetComputeUnitRequest(dev0, 60); rc != ErrInvalidParam {
		t.Errorf("AccelSetComputeUnitRequest above the hard limit: %d", rc)
	}
	if rc := l.SetWorkerPriority(90); rc != Success {
		t.Errorf("AccelSetWorkerPriority: %d", rc)
	}
	if rc := l.SetWorkerPriority(0); rc != ErrInvalidParam {
		t.Errorf("AccelSetWorkerPriority(0): %d", rc)
	}
	os.Unsetenv("ACCELERATOR_WORKER_ID")

	// Processes from 8 goroutines at once, no lock, as the hypervisor polls.
	var wg sync.WaitGroup
	errs := make(chan string, 8*20)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos := make([]ProcessInformation, 1024)
			for i := 0; i < 20; i++ {
				var n uint64
				if rc := l.GetProcessInformation(&infos[0], 1024, &n); rc != Success {
					errs <- "AccelGetProcessInformation failed"
				}
				for k := uint64(0); k < n; k++ {
					if Str(infos[k].ProcessID[:]) == "" || Str(infos[k].DeviceUUID[:]) == "" {
						errs <- "empty process entry"
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, line := range Logged() {
		switch line.Level {
		case "DEBUG", "INFO", "WARN", "ERROR":
		default:
			t.Errorf("log level %q: %s", line.Level, line.Message)
		}
	}
}

// The hypervisor's reload test: close and load again, 30 times in one process.
func TestReload(t *testing.T) {
	path, _, _ := config(t)
	const cycles = 30
	var first []ExtendedDeviceInfo
	for i := 0; i < cycles; i++ {
		l, err := Open(path)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		devs := discover(t, l)
		if first == nil {
			first = devs
		} else if len(devs) != len(first) || devs[0].Basic.UUID != first[0].Basic.UUID {
			t.Fatalf("cycle %d: %d devices", i, len(devs))
		}
		if err := l.Close(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	t.Logf("%d close/reload cycles", cycles)
}
