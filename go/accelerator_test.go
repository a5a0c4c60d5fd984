package accelerator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestMain gives the library a private state directory before its first call.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "accelerator-go-test.")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("ACCELERATOR_STATE_DIR", dir)
	os.Unsetenv("ACCELERATOR_VENDOR")
	os.Unsetenv("ACCELERATOR_STUB_DEVICES")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func uuid(i int) string { return fmt.Sprintf("stub-device-%d", i) }

// wantErr checks err is an *Error with the code, matching its sentinel and
// no other, and carrying the library's reason.
func wantErr(t *testing.T, err error, sentinel error) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v, got success", sentinel)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %T: %v", err, err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("want errors.Is(%v), got %v", sentinel, err)
	}
	for _, other := range []error{ErrInvalidParam, ErrNotFound, ErrNotSupported,
		ErrResourceExhausted, ErrOperationFailed, ErrInternal} {
		if other != sentinel && errors.Is(err, other) {
			t.Fatalf("%v also matches %v", err, other)
		}
	}
	if e.Message == "" || e.Op == "" || !strings.Contains(err.Error(), e.Code.String()) {
		t.Fatalf("error lacks its reason: %+v / %q", e, err.Error())
	}
	return e
}

func TestVendorAndVersion(t *testing.T) {
	name, err := VendorName()
	if err != nil || name != "stub" {
		t.Fatalf("VendorName = %q, %v", name, err)
	}
	if LibraryABIVersion() != ABIVersion || ABIVersion != 1 {
		t.Fatalf("ABI version: library %d, header %d", LibraryABIVersion(), ABIVersion)
	}
}

func TestDevices(t *testing.T) {
	n, err := DeviceCount()
	if err != nil || n != 4 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	devs, err := Devices()
	if err != nil || len(devs) != 4 {
		t.Fatalf("Devices = %d, %v", len(devs), err)
	}
	for i, d := range devs {
		if d.UUID != uuid(i) || d.Index != i || d.Vendor != "STUB" || d.TotalComputeUnits != 108 ||
			d.MaxTFLOPS != 312 || d.TotalMemoryBytes == 0 || !d.Capabilities.SupportsPartitioning ||
			d.Capabilities.MaxPartitions != 7 || len(d.RelatedDevices) != 0 {
			t.Errorf("device %d: %+v", i, d)
		}
		info, err := DeviceInfo(i)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.RelatedDevices) != 3 {
			t.Errorf("device %d: %d related devices", i, len(info.RelatedDevices))
		}
		for _, r := range info.RelatedDevices {
			if r.ConnectionType != "NVLink" || r.DeviceUUID == d.UUID || r.BandwidthMBps == 0 {
				t.Errorf("device %d: link %+v", i, r)
			}
		}
		info.RelatedDevices = []RelatedDevice{}
		if !reflect.DeepEqual(info, d) {
			t.Errorf("getDeviceInfo and GetAllDevices disagree:\n%+v\n%+v", info, d)
		}
	}
	wantErr(t, func() error { _, err := DeviceInfo(4); return err }(), ErrNotFound)
	wantErr(t, func() error { _, err := DeviceInfo(-1); return err }(), ErrInvalidParam)
}

func TestPartitionTemplates(t *testing.T) {
	ts, err := PartitionTemplates(0)
	if err != nil || len(ts) != 3 {
		t.Fatalf("PartitionTemplates = %+v, %v", ts, err)
	}
	slices := map[string]uint32{"mig-1g.7gb": 1, "mig-2g.14gb": 2, "mig-3g.21gb": 3}
	for _, tp := range ts {
		if slices[tp.TemplateID] != tp.SliceCount || tp.MemoryBytes == 0 || tp.ComputeUnits == 0 ||
			tp.IsDefault != (tp.TemplateID == "mig-2g.14gb") {
			t.Errorf("template %+v", tp)
		}
	}
	wantErr(t, func() error { _, err := PartitionTemplates(9); return err }(), ErrNotFound)
}

func TestTopology(t *testing.T) {
	topo, err := Topology()
	if err != nil || len(topo.Devices) != 4 || topo.TopologyType == "" {
		t.Fatalf("Topology = %+v, %v", topo, err)
	}
	for i, d := range topo.Devices {
		if d.DeviceUUID != uuid(i) || len(d.Connections) != 3 {
			t.Errorf("topology of %d: %+v", i, d)
		}
	}
	sub, err := Topology(2, 0)
	if err != nil || len(sub.Devices) != 2 || sub.Devices[0].DeviceUUID != uuid(2) {
		t.Fatalf("Topology(2, 0) = %+v, %v", sub, err)
	}
	wantErr(t, func() error { _, err := Topology(0, 17); return err }(), ErrNotFound)
}

func TestPartitions(t *testing.T) {
	dev := uuid(1)
	var parts []Partition
	for i := 0; i < 2; i++ {
		p, err := AssignPartition("mig-3g.21gb", dev)
		if err != nil || p.PartitionUUID == "" {
			t.Fatalf("AssignPartition = %+v, %v", p, err)
		}
		parts = append(parts, p)
	}
	// 6 of 7 slices are taken: another 3-slice partition does not fit.
	wantErr(t, func() error { _, err := AssignPartition("mig-3g.21gb", dev); return err }(), ErrResourceExhausted)
	wantErr(t, func() error { _, err := AssignPartition("mig-9g.99gb", dev); return err }(), ErrNotFound)
	wantErr(t, func() error { _, err := AssignPartition("mig-1g.7gb", "no-such-device"); return err }(), ErrNotFound)
	wantErr(t, func() error { _, err := AssignPartition("", dev); return err }(), ErrInvalidParam)
	wantErr(t, func() error { _, err := AssignPartition(strings.Repeat("x", 64), dev); return err }(), ErrInvalidParam)

	m, err := DeviceMetrics(dev)
	if err != nil || m[0].MemoryUsedBytes == 0 {
		t.Fatalf("metrics with partitions: %+v, %v", m, err)
	}
	if err := RemovePartition(parts[0].PartitionUUID, dev); err != nil {
		t.Fatal(err)
	}
	wantErr(t, RemovePartition(parts[0].PartitionUUID, dev), ErrNotFound)
	if err := RemovePartition("mig-3g.21gb", dev); err != nil { // by template: the newest
		t.Fatal(err)
	}
	wantErr(t, RemovePartition("mig-3g.21gb", dev), ErrNotFound)
	wantErr(t, RemovePartition("x\x00y", dev), ErrInvalidParam)
}

func TestHardLimits(t *testing.T) {
	dev := uuid(2)
	if err := SetMemHardLimit("go-worker-1", dev, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := SetMemHardLimit("go-worker-1", dev, 1<<30); err != nil {
		t.Fatalf("the same limit again: %v", err)
	}
	wantErr(t, SetMemHardLimit("go-worker-1", dev, 2<<30), ErrOperationFailed)
	wantErr(t, SetMemHardLimit("go-worker-2", dev, 0), ErrInvalidParam)
	wantErr(t, SetMemHardLimit("go-worker-2", dev, 1<<62), ErrInvalidParam)
	wantErr(t, SetMemHardLimit("go-worker-2", "stub-device-77", 1<<30), ErrNotFound)
	if err := SetComputeUnitHardLimit("go-worker-1", dev, 50); err != nil {
		t.Fatal(err)
	}
	wantErr(t, SetComputeUnitHardLimit("go-worker-1", dev, 60), ErrOperationFailed)
	wantErr(t, SetComputeUnitHardLimit("go-worker-2", dev, 0), ErrInvalidParam)
	wantErr(t, SetComputeUnitHardLimit("go-worker-2", dev, 101), ErrInvalidParam)
	// Requests and priorities may be set again; bad ones change nothing.
	for _, p := range []uint32{30, 50, 0} {
		if err := SetComputeUnitRequest("go-worker-1", dev, p); err != nil {
			t.Fatalf("request %d: %v", p, err)
		}
	}
	wantErr(t, SetComputeUnitRequest("go-worker-1", dev, 60), ErrInvalidParam) // above its limit
	wantErr(t, SetComputeUnitRequest("go-worker-2", dev, 101), ErrInvalidParam)
	wantErr(t, SetComputeUnitRequest("go-worker-2", "stub-device-77", 10), ErrInvalidParam)
	if err := SetWorkerPriority("go-worker-1", 90); err != nil {
		t.Fatal(err)
	}
	wantErr(t, SetWorkerPriority("go-worker-1", 0), ErrInvalidParam)
	wantErr(t, SetWorkerPriority("go-worker-1", 101), ErrInvalidParam)
}

func TestSnapshotResumeAndProcesses(t *testing.T) {
	dev, pid := uuid(0), os.Getpid()
	if err := Snapshot(dev, pid); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Snapshot(dev, pid), ErrOperationFailed) // already snapshotted
	if err := Resume(dev, pid); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Resume(dev, pid), ErrOperationFailed) // not snapshotted
	wantErr(t, Snapshot(dev), ErrInvalidParam)
	wantErr(t, Snapshot(dev, 1<<30), ErrNotFound)
	wantErr(t, Snapshot("no-such-device", pid), ErrNotFound)

	// Our process is tracked now, on stub-device-0.
	id := fmt.Sprint(pid)
	cu, err := ProcessComputeUtilization()
	if err != nil {
		t.Fatal(err)
	}
	mu, err := ProcessMemoryUtilization()
	if err != nil {
		t.Fatal(err)
	}
	found := func(id, dev string) bool {
		for _, u := range cu {
			if u.ProcessID == id && u.DeviceUUID == dev {
				return true
			}
		}
		return false
	}
	if !found(id, dev) || len(mu) != len(cu) {
		t.Fatalf("tracked process %s missing: compute %+v memory %+v", id, cu, mu)
	}

	// The library-allocated style reports named processes too.
	cu2, err := ProcessComputeUtilizationOf([]string{dev}, []string{"go-named-process"})
	if err != nil {
		t.Fatal(err)
	}
	cu = cu2
	if !found("go-named-process", dev) || !found(id, dev) {
		t.Fatalf("getProcessComputeUtilization: %+v", cu2)
	}
	mu2, err := ProcessMemoryUtilizationOf([]string{dev}, []string{"go-named-process"})
	if err != nil || len(mu2) != len(cu2) {
		t.Fatalf("getProcessMemoryUtilization: %+v, %v", mu2, err)
	}
	wantErr(t, func() error { _, err := ProcessComputeUtilizationOf([]string{dev}, nil); return err }(), ErrInvalidParam)
	wantErr(t, func() error { _, err := ProcessMemoryUtilizationOf([]string{"nope"}, []string{"1"}); return err }(), ErrNotFound)
}

func TestMetrics(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	all, err := DeviceMetrics()
	if err != nil || len(all) != 4 {
		t.Fatalf("DeviceMetrics() = %+v, %v", all, err)
	}
	for i, m := range all {
		if m.DeviceUUID != uuid(i) || m.MemoryTotalBytes != devs[i].TotalMemoryBytes || m.PowerUsageWatts <= 0 {
			t.Errorf("metrics %d: %+v", i, m)
		}
	}
	two, err := DeviceMetrics(uuid(3), uuid(1))
	if err != nil || len(two) != 2 || two[0].DeviceUUID != uuid(3) || two[1].DeviceUUID != uuid(1) {
		t.Fatalf("DeviceMetrics(3, 1) = %+v, %v", two, err)
	}
	wantErr(t, func() error { _, err := DeviceMetrics(uuid(0), "stub-device-x"); return err }(), ErrNotFound)

	ext, err := ExtendedDeviceMetrics()
	if err != nil || len(ext) != 4 {
		t.Fatalf("ExtendedDeviceMetrics() = %+v, %v", ext, err)
	}
	for i, x := range ext {
		if x.DeviceUUID != uuid(i) || len(x.NVLinkBandwidthMBps) != 3 {
			t.Errorf("extended metrics %d: %+v", i, x)
		}
	}
	wantErr(t, func() error { _, err := ExtendedDeviceMetrics("nope"); return err }(), ErrNotFound)
}

func TestLog(t *testing.T) {
	var mu sync.Mutex
	var got []string
	SetLogHandler(func(level LogLevel, msg string) {
		mu.Lock()
		got = append(got, level.String()+" "+msg)
		mu.Unlock()
	})
	defer SetLogHandler(nil)
	if err := Log(LogError, "hello from go"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "hello from go") {
		t.Fatalf("log handler saw %q", got)
	}
	wantErr(t, Log(LogLevel(42), "x"), ErrInvalidParam)
	wantErr(t, Log(LogInfo, ""), ErrInvalidParam)
}

func TestErrorType(t *testing.T) {
	_, err := DeviceInfo(99)
	e := wantErr(t, err, ErrNotFound)
	if e.Code != CodeNotFound || e.Op != "getDeviceInfo" || !strings.Contains(e.Message, "99") {
		t.Fatalf("%+v", e)
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", err), ErrNotFound) {
		t.Fatal("a wrapped error does not match its sentinel")
	}
	if !errors.Is(err, &Error{Code: CodeNotFound}) || errors.Is(err, &Error{Code: CodeInternal}) {
		t.Fatal("*Error targets")
	}
	if CodeResourceExhausted.String() != "RESULT_ERROR_RESOURCE_EXHAUSTED" || CodeSuccess.Sentinel() != nil {
		t.Fatal("Code names")
	}
}

// Many goroutines, each checking that the error it gets is its own: the
// last error is per OS thread, and the package pins each call to one.
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				bad := 1000 + g*100 + i
				_, err := DeviceInfo(bad)
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, fmt.Sprint(bad)) {
					errs <- fmt.Errorf("goroutine %d: DeviceInfo(%d): %v", g, bad, err)
					return
				}
				if _, err := Devices(); err != nil {
					errs <- err
					return
				}
				if _, err := DeviceMetrics(uuid(g % 4)); err != nil {
					errs <- err
					return
				}
				if _, err := ExtendedDeviceMetrics(); err != nil {
					errs <- err
					return
				}
				if _, err := PartitionTemplates(g % 4); err != nil {
					errs <- err
					return
				}
				p, err := AssignPartition("mig-1g.7gb", uuid(3))
				if err == nil {
					err = RemovePartition(p.PartitionUUID, uuid(3))
				} else if errors.Is(err, ErrResourceExhausted) {
					err = nil
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Every call, repeated, leaves the C heap where it was.
func TestNoCMemoryLeaked(t *testing.T) {
	round := func() {
		_, _ = VendorName()
		_, _ = Devices()
		_, _ = DeviceInfo(0)
		_, _ = DeviceInfo(99)
		_, _ = PartitionTemplates(1)
		_, _ = Topology()
		_, _ = DeviceMetrics()
		_, _ = ExtendedDeviceMetrics()
		_, _ = ProcessComputeUtilization()
		_, _ = ProcessMemoryUtilization()
		_, _ = ProcessComputeUtilizationOf([]string{uuid(0)}, []string{"leak-check"})
		_, _ = ProcessMemoryUtilizationOf([]string{uuid(0)}, []string{"leak-check"})
		if p, err := AssignPartition("mig-1g.7gb", uuid(0)); err == nil {
			_ = RemovePartition(p.PartitionUUID, uuid(0))
		}
		_ = SetMemHardLimit("leak-worker", uuid(0), 1<<20)
		_ = SetComputeUnitHardLimit("leak-worker", uuid(0), 10)
		_ = Snapshot(uuid(0), 1<<30)
		_ = Log(LogTrace, "leak check")
	}
	for i := 0; i < 20; i++ { // warm up caches and thread-locals
		round()
	}
	// A leak grows the heap in every window; caches and new threads'
	// thread-locals grow it in some. Fail only when every window grew.
	var growth []int64
	for w := 0; w < 3; w++ {
		before := cHeapInUse()
		for i := 0; i < 300; i++ {
			round()
		}
		growth = append(growth, int64(cHeapInUse())-int64(before))
	}
	// 300 rounds of ~20 calls: a leak of even one small buffer per call
	// shows as well over 64 KiB per window.
	leaking := true
	for _, g := range growth {
		if g < 64<<10 {
			leaking = false
		}
	}
	if leaking {
		t.Fatalf("C heap grew by %v bytes in three windows of 300 rounds", growth)
	}
}

// The probe (dlopen) and this package (cgo) see the same library state.
func TestProbeJSONAgrees(t *testing.T) {
	probe := os.Getenv("ACCELERATOR_PROBE")
	lib := os.Getenv("ACCELERATOR_LIB")
	if probe == "" {
		probe, lib = filepath.Join("..", "build", "probe"), filepath.Join("..", "build", "libaccelerator.so")
	}
	if _, err := os.Stat(probe); err != nil {
		t.Skipf("no probe at %s (make build/probe)", probe)
	}
	out, err := exec.Command(probe, "--json", lib).Output()
	if err != nil {
		t.Fatalf("%s --json: %v", probe, err)
	}
	// The device kind, its metadata and PCI record are checked against
	// docs/device.schema.json by probe/test_pci.sh.
	type probeDevice struct {
		Device
		PartitionTemplates []PartitionTemplate `json:"partitionTemplates"`
		Kind               string              `json:"kind"`
		Metadata           json.RawMessage     `json:"metadata"`
		PCI                json.RawMessage     `json:"pci"`
	}
	var doc struct {
		Schema          string             `json:"schema"`
		Library         string             `json:"library"`
		Vendor          string             `json:"vendor"`
		ABIVersion      uint32             `json:"abiVersion"`
		VendorStatus    string             `json:"vendorStatus"`
		PCI             []json.RawMessage  `json:"pci"`
		Devices         []probeDevice      `json:"devices"`
		Topology        DeviceTopologyInfo `json:"topology"`
		Metrics         []Metrics          `json:"metrics"`
		ExtendedMetrics []ExtendedMetrics  `json:"extendedMetrics"`
		Processes       struct {
			Compute []ComputeUtilization `json:"compute"`
			Memory  []MemoryUtilization  `json:"memory"`
		} `json:"processes"`
		// GetWorkerShares, which the Go bindings do not carry: checked
		// against docs/device.schema.json by probe/test_pci.sh.
		Workers []json.RawMessage `json:"workers"`
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("probe JSON does not follow accelerator-probe/1: %v\n%s", err, out)
	}
	if doc.Schema != "accelerator-probe/1" || doc.Vendor != "stub" || doc.ABIVersion != ABIVersion ||
		!strings.HasPrefix(doc.VendorStatus, "stub: 4 devices") {
		t.Fatalf("probe header: %s %s %d %q", doc.Schema, doc.Vendor, doc.ABIVersion, doc.VendorStatus)
	}
	for i, pd := range doc.Devices {
		d, err := DeviceInfo(i)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pd.Device, d) {
			t.Errorf("device %d: probe %+v\ngo %+v", i, pd.Device, d)
		}
		ts, _ := PartitionTemplates(i)
		if !reflect.DeepEqual(pd.PartitionTemplates, ts) {
			t.Errorf("templates %d: probe %+v\ngo %+v", i, pd.PartitionTemplates, ts)
		}
	}
	topo, _ := Topology()
	m, _ := DeviceMetrics()
	x, _ := ExtendedDeviceMetrics()
	cu, _ := ProcessComputeUtilization()
	mu, _ := ProcessMemoryUtilization()
	for _, c := range []struct {
		name       string
		probe, lib any
	}{
		{"topology", doc.Topology, topo},
		{"metrics", doc.Metrics, m},
		{"extended metrics", doc.ExtendedMetrics, x},
		{"process compute", doc.Processes.Compute, cu},
		{"process memory", doc.Processes.Memory, mu},
	} {
		if !reflect.DeepEqual(c.probe, c.lib) {
			t.Errorf("%s: probe %+v\ngo %+v", c.name, c.probe, c.lib)
		}
	}
}
