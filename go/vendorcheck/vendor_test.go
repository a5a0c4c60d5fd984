// Package vendorcheck_test runs the cgo binding against whichever vendor
// build pkg-config links: the stub in "make test-go", the AMD build on the
// fake MI300X node in "make test-go-amd" (vendors/amd/vendor.mk), the
// Habana build on the fake Gaudi 2 node in "make test-go-habana"
// (vendors/habana/vendor.mk: no partitions, no links HLML can tell).
//
//	ACCEL_CGO_VENDOR    the vendor the library must report (default stub)
//	ACCEL_CGO_TEMPLATE  a template of device 0 to assign and remove
//	                    (default: device 0's first template)
package vendorcheck_test

import (
	"errors"
	"os"
	"sync"
	"testing"

	accelerator "github.com/accelerator-provider/accelerator/go"
)

func want() string {
	if v := os.Getenv("ACCEL_CGO_VENDOR"); v != "" {
		return v
	}
	return "stub"
}

func TestVendorThroughCgo(t *testing.T) {
	vendor := want()
	if os.Getenv("ACCELERATOR_STATE_DIR") == "" {
		dir := t.TempDir()
		os.Setenv("ACCELERATOR_STATE_DIR", dir)
	}
	name, err := accelerator.VendorName()
	if err != nil || name != vendor {
		t.Fatalf("vendor %q (%v), want %q", name, err, vendor)
	}
	devs, err := accelerator.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices: %d (%v)", len(devs), err)
	}
	uuids := make([]string, len(devs))
	indices := make([]int, len(devs))
	for i, d := range devs {
		uuids[i], indices[i] = d.UUID, i
		// HLML gives no compute unit count: 0, not an invented one.
		if d.UUID == "" || d.Index != i || d.TotalMemoryBytes == 0 || (d.TotalComputeUnits == 0) != (vendor == "habana") {
			t.Errorf("device %d: %+v", i, d)
		}
		if vendor != "amd" {
			continue
		}
		// Devices leaves RelatedDevices empty; DeviceInfo fills it.
		full, err := accelerator.DeviceInfo(i)
		if err != nil || full.Vendor != "AMD" || full.Model != "AMD Instinct MI300X" ||
			full.TotalComputeUnits != 304 || full.TotalMemoryBytes != 192<<30 || len(full.RelatedDevices) != 7 {
			t.Errorf("MI300X %d: %+v (%v)", i, full, err)
		}
	}

	topo, err := accelerator.Topology(indices...)
	if err != nil || len(topo.Devices) != len(devs) {
		t.Fatalf("topology: %+v (%v)", topo, err)
	}
	links := len(devs) - 1
	if vendor == "habana" {
		links = 0
	}
	for i, row := range topo.Devices {
		if len(row.Connections) != links {
			t.Errorf("row %d: %d connections", i, len(row.Connections))
		}
		for _, c := range row.Connections {
			if vendor == "amd" && (c.ConnectionType != "XGMI" || c.BandwidthMBps != 64000) {
				t.Errorf("row %d: %+v", i, c)
			}
		}
	}
	if vendor == "amd" && topo.TopologyType != "XGMI" {
		t.Errorf("topology type %q", topo.TopologyType)
	}

	templates, err := accelerator.PartitionTemplates(0)
	if vendor == "habana" {
		_, aerr := accelerator.AssignPartition("any", uuids[0])
		if err != nil || len(templates) != 0 || !errors.Is(aerr, accelerator.ErrNotSupported) {
			t.Errorf("Gaudi has no partitions: %d templates (%v), assign: %v", len(templates), err, aerr)
		}
		metrics(t, uuids)
		return
	}
	if err != nil || len(templates) == 0 {
		t.Fatalf("templates of device 0: %v (%v)", templates, err)
	}
	tpl := os.Getenv("ACCEL_CGO_TEMPLATE")
	if tpl == "" {
		tpl = templates[0].TemplateID
	}
	p, err := accelerator.AssignPartition(tpl, uuids[0])
	if err != nil || p.PartitionUUID == "" || p.PartitionUUID == uuids[0] {
		t.Fatalf("assign %s: %+v (%v)", tpl, p, err)
	}
	if err := accelerator.RemovePartition(p.PartitionUUID, uuids[0]); err != nil {
		t.Fatalf("remove %s: %v", p.PartitionUUID, err)
	}
	if err := accelerator.RemovePartition(p.PartitionUUID, uuids[0]); !errors.Is(err, accelerator.ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	if vendor == "amd" {
		// GPU 1 of the fake runs a process: a device-wide mode change is refused.
		if _, err := accelerator.AssignPartition(tpl, uuids[1]); !errors.Is(err, accelerator.ErrOperationFailed) {
			t.Errorf("mode change on a busy GPU: %v", err)
		}
		if err := accelerator.Snapshot(uuids[0], os.Getpid()); !errors.Is(err, accelerator.ErrNotSupported) {
			t.Errorf("snapshot: %v", err)
		}
		mem, err := accelerator.ProcessMemoryUtilizationOf(uuids, []string{"4343"})
		if err != nil || len(mem) != 1 || mem[0].DeviceUUID != uuids[1] || mem[0].UsedBytes != 2<<30 {
			t.Errorf("process memory: %+v (%v)", mem, err)
		}
	}

	metrics(t, uuids)
}

// metrics reads the devices' metrics from 8 goroutines at once (under
// -race), then their extended metrics.
func metrics(t *testing.T, uuids []string) {
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ms, err := accelerator.DeviceMetrics(uuids...)
				if err != nil || len(ms) != len(uuids) || ms[0].TemperatureCelsius <= 0 {
					t.Errorf("metrics: %v (%v)", ms, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := accelerator.ExtendedDeviceMetrics(uuids...); err != nil {
		t.Errorf("extended metrics: %v", err)
	}
}
