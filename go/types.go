package accelerator

/*
#include <accelerator.h>
*/
import "C"

// The Go forms of the ABI's structs. JSON names are the ABI's field names,
// as in the probe's --json schema (probe/README.md).

// Device is DeviceBasicInfo with its properties, capabilities and (from
// DeviceInfo only) related devices.
type Device struct {
	Index             int     `json:"index"`
	UUID              string  `json:"uuid"`
	Vendor            string  `json:"vendor"`
	Model             string  `json:"model"`
	DriverVersion     string  `json:"driverVersion"`
	FirmwareVersion   string  `json:"firmwareVersion"`
	NUMANode          int     `json:"numaNode"` // -1 if none
	TotalMemoryBytes  uint64  `json:"totalMemoryBytes"`
	TotalComputeUnits uint64  `json:"totalComputeUnits"`
	MaxTFLOPS         float64 `json:"maxTflops"`
	PCIeGen           uint32  `json:"pcieGen"`
	PCIeWidth         uint32  `json:"pcieWidth"`

	Properties     DeviceProperties   `json:"properties"`
	Capabilities   DeviceCapabilities `json:"capabilities"`
	RelatedDevices []RelatedDevice    `json:"relatedDevices"`
}

// DeviceProperties is the ABI's DeviceProperties.
type DeviceProperties struct {
	ClockGraphics          uint32 `json:"clockGraphics"` // MHz
	ClockSM                uint32 `json:"clockSM"`
	ClockMem               uint32 `json:"clockMem"`
	ClockAI                uint32 `json:"clockAI"`
	PowerLimit             uint32 `json:"powerLimit"`           // W
	TemperatureThreshold   uint32 `json:"temperatureThreshold"` // °C
	ECCEnabled             bool   `json:"eccEnabled"`
	PersistenceModeEnabled bool   `json:"persistenceModeEnabled"`
	ComputeCapability      string `json:"computeCapability"`
	ChipType               string `json:"chipType"`
}

// DeviceCapabilities is the ABI's DeviceCapabilities.
type DeviceCapabilities struct {
	SupportsPartitioning  bool   `json:"supportsPartitioning"`
	SupportsSoftIsolation bool   `json:"supportsSoftIsolation"`
	SupportsHardIsolation bool   `json:"supportsHardIsolation"`
	SupportsSnapshot      bool   `json:"supportsSnapshot"`
	SupportsMetrics       bool   `json:"supportsMetrics"`
	MaxPartitions         uint32 `json:"maxPartitions"`
	MaxWorkersPerDevice   uint32 `json:"maxWorkersPerDevice"`
}

// RelatedDevice is a link to another device.
type RelatedDevice struct {
	DeviceUUID     string `json:"deviceUUID"`
	ConnectionType string `json:"connectionType"` // "NVLink", "PCIe", "HCCS", …
	BandwidthMBps  uint32 `json:"bandwidthMBps"`
	LatencyNs      uint32 `json:"latencyNs"`
}

// PartitionTemplate is one way to partition a device.
type PartitionTemplate struct {
	TemplateID   string  `json:"templateId"`
	Name         string  `json:"name"`
	MemoryBytes  uint64  `json:"memoryBytes"`
	ComputeUnits uint64  `json:"computeUnits"`
	TFLOPS       float64 `json:"tflops"`
	SliceCount   uint32  `json:"sliceCount"`
	IsDefault    bool    `json:"isDefault"`
	Description  string  `json:"description"`
}

// DeviceTopology is one device's connections.
type DeviceTopology struct {
	DeviceUUID  string          `json:"deviceUUID"`
	NUMANode    int             `json:"numaNode"`
	Connections []RelatedDevice `json:"connections"`
}

// DeviceTopologyInfo is the ABI's ExtendedDeviceTopology.
type DeviceTopologyInfo struct {
	TopologyType        string           `json:"topologyType"`
	NVLinkBandwidthMBps uint32           `json:"nvlinkBandwidthMBps"`
	IBNICCount          uint32           `json:"ibNicCount"`
	Devices             []DeviceTopology `json:"devices"`
}

// Partition is an assigned partition (PartitionAssignment's outputs).
type Partition struct {
	TemplateID    string `json:"templateId"`
	DeviceUUID    string `json:"deviceUUID"`
	PartitionUUID string `json:"partitionUUID"`
	OverheadBytes uint64 `json:"partitionOverheadBytes"`
}

// ComputeUtilization is one process's compute use on one device.
type ComputeUtilization struct {
	ProcessID          string  `json:"processId"`
	DeviceUUID         string  `json:"deviceUUID"`
	UtilizationPercent float64 `json:"utilizationPercent"`
	ActiveSMs          uint64  `json:"activeSMs"`
	TotalSMs           uint64  `json:"totalSMs"`
	TFLOPSUsed         float64 `json:"tflopsUsed"`
}

// MemoryUtilization is one process's memory use on one device.
type MemoryUtilization struct {
	ProcessID          string  `json:"processId"`
	DeviceUUID         string  `json:"deviceUUID"`
	UsedBytes          uint64  `json:"usedBytes"`
	ReservedBytes      uint64  `json:"reservedBytes"`
	UtilizationPercent float64 `json:"utilizationPercent"`
}

// Metrics is the ABI's DeviceMetrics.
type Metrics struct {
	DeviceUUID             string  `json:"deviceUUID"`
	PowerUsageWatts        float64 `json:"powerUsageWatts"`
	TemperatureCelsius     float64 `json:"temperatureCelsius"`
	PCIeRxBytes            uint64  `json:"pcieRxBytes"`
	PCIeTxBytes            uint64  `json:"pcieTxBytes"`
	SMActivePercent        uint32  `json:"smActivePercent"`
	TensorCoreUsagePercent uint32  `json:"tensorCoreUsagePercent"`
	MemoryUsedBytes        uint64  `json:"memoryUsedBytes"`
	MemoryTotalBytes       uint64  `json:"memoryTotalBytes"`
}

// ExtendedMetrics is the ABI's ExtendedDeviceMetrics: per-link bandwidths.
type ExtendedMetrics struct {
	DeviceUUID          string   `json:"deviceUUID"`
	NVLinkBandwidthMBps []uint32 `json:"nvlinkBandwidthMBps"`
	IBNICBandwidthMBps  []uint64 `json:"ibNicBandwidthMBps"`
	PCIeBandwidthMBps   []uint32 `json:"pcieBandwidthMBps"`
}

func device(e *C.ExtendedDeviceInfo) Device {
	b, p, c := &e.basic, &e.props, &e.capabilities
	return Device{
		Index:             int(b.index),
		UUID:              goString(&b.uuid[0], len(b.uuid)),
		Vendor:            goString(&b.vendor[0], len(b.vendor)),
		Model:             goString(&b.model[0], len(b.model)),
		DriverVersion:     goString(&b.driverVersion[0], len(b.driverVersion)),
		FirmwareVersion:   goString(&b.firmwareVersion[0], len(b.firmwareVersion)),
		NUMANode:          int(b.numaNode),
		TotalMemoryBytes:  uint64(b.totalMemoryBytes),
		TotalComputeUnits: uint64(b.totalComputeUnits),
		MaxTFLOPS:         float64(b.maxTflops),
		PCIeGen:           uint32(b.pcieGen),
		PCIeWidth:         uint32(b.pcieWidth),
		Properties: DeviceProperties{
			ClockGraphics:          uint32(p.clockGraphics),
			ClockSM:                uint32(p.clockSM),
			ClockMem:               uint32(p.clockMem),
			ClockAI:                uint32(p.clockAI),
			PowerLimit:             uint32(p.powerLimit),
			TemperatureThreshold:   uint32(p.temperatureThreshold),
			ECCEnabled:             bool(p.eccEnabled),
			PersistenceModeEnabled: bool(p.persistenceModeEnabled),
			ComputeCapability:      goString(&p.computeCapability[0], len(p.computeCapability)),
			ChipType:               goString(&p.chipType[0], len(p.chipType)),
		},
		Capabilities: DeviceCapabilities{
			SupportsPartitioning:  bool(c.supportsPartitioning),
			SupportsSoftIsolation: bool(c.supportsSoftIsolation),
			SupportsHardIsolation: bool(c.supportsHardIsolation),
			SupportsSnapshot:      bool(c.supportsSnapshot),
			SupportsMetrics:       bool(c.supportsMetrics),
			MaxPartitions:         uint32(c.maxPartitions),
			MaxWorkersPerDevice:   uint32(c.maxWorkersPerDevice),
		},
		RelatedDevices: []RelatedDevice{},
	}
}

func related(r *C.RelatedDevice) RelatedDevice {
	return RelatedDevice{
		DeviceUUID:     goString(&r.deviceUUID[0], len(r.deviceUUID)),
		ConnectionType: goString(&r.connectionType[0], len(r.connectionType)),
		BandwidthMBps:  uint32(r.bandwidthMBps),
		LatencyNs:      uint32(r.latencyNs),
	}
}

func template(t *C.PartitionTemplate) PartitionTemplate {
	return PartitionTemplate{
		TemplateID:   goString(&t.templateId[0], len(t.templateId)),
		Name:         goString(&t.name[0], len(t.name)),
		MemoryBytes:  uint64(t.memoryBytes),
		ComputeUnits: uint64(t.computeUnits),
		TFLOPS:       float64(t.tflops),
		SliceCount:   uint32(t.sliceCount),
		IsDefault:    bool(t.isDefault),
		Description:  goString(&t.description[0], len(t.description)),
	}
}

func compute(u *C.ComputeUtilization) ComputeUtilization {
	return ComputeUtilization{
		ProcessID:          goString(&u.processId[0], len(u.processId)),
		DeviceUUID:         goString(&u.deviceUUID[0], len(u.deviceUUID)),
		UtilizationPercent: float64(u.utilizationPercent),
		ActiveSMs:          uint64(u.activeSMs),
		TotalSMs:           uint64(u.totalSMs),
		TFLOPSUsed:         float64(u.tflopsUsed),
	}
}

func memory(u *C.MemoryUtilization) MemoryUtilization {
	return MemoryUtilization{
		ProcessID:          goString(&u.processId[0], len(u.processId)),
		DeviceUUID:         goString(&u.deviceUUID[0], len(u.deviceUUID)),
		UsedBytes:          uint64(u.usedBytes),
		ReservedBytes:      uint64(u.reservedBytes),
		UtilizationPercent: float64(u.utilizationPercent),
	}
}

func metrics(m *C.DeviceMetrics) Metrics {
	return Metrics{
		DeviceUUID:             goString(&m.deviceUUID[0], len(m.deviceUUID)),
		PowerUsageWatts:        float64(m.powerUsageWatts),
		TemperatureCelsius:     float64(m.temperatureCelsius),
		PCIeRxBytes:            uint64(m.pcieRxBytes),
		PCIeTxBytes:            uint64(m.pcieTxBytes),
		SMActivePercent:        uint32(m.smActivePercent),
		TensorCoreUsagePercent: uint32(m.tensorCoreUsagePercent),
		MemoryUsedBytes:        uint64(m.memoryUsedBytes),
		MemoryTotalBytes:       uint64(m.memoryTotalBytes),
	}
}
