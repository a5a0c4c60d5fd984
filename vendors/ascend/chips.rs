//! What each Ascend chip family offers for vNPUs: its template table and
//! the capacity limits, read by discovery (whether a device can be
//! partitioned, and into how many) and by `vnpu` (the partitions
//! themselves). Data only: it depends on no other module.

/// DCMI_MAX_VDEV_NUM: vNPUs one chip can hold.
pub const MAX_VDEVS: u32 = 16;

pub struct TemplateSpec {
    pub id: &'static str,
    pub aicore: u32,
    pub aicpu: u32,
    pub is_default: bool,
    pub desc: &'static str,
}

/// One chip family's vNPU facts (Huawei's vNPU template documentation; see
/// docs/ascend.md for what is unverified).
pub struct ChipSpec {
    pub family: &'static str,
    pub aicpu_total: u32,
    pub templates: &'static [TemplateSpec],
}

const fn t(
    id: &'static str,
    aicore: u32,
    aicpu: u32,
    is_default: bool,
    desc: &'static str,
) -> TemplateSpec {
    TemplateSpec {
        id,
        aicore,
        aicpu,
        is_default,
        desc,
    }
}

static ASCEND_910: ChipSpec = ChipSpec {
    family: "910",
    aicpu_total: 14,
    templates: &[
        t("vir02", 2, 1, false, "2 AI cores, 1 AI CPU"),
        t("vir04", 4, 1, true, "4 AI cores, 1 AI CPU"),
        t("vir08", 8, 3, false, "8 AI cores, 3 AI CPUs"),
        t("vir16", 16, 7, false, "16 AI cores, 7 AI CPUs"),
    ],
};

static ASCEND_310P: ChipSpec = ChipSpec {
    family: "310P",
    aicpu_total: 8,
    templates: &[
        t("vir01", 1, 1, false, "1 AI core, 1 AI CPU"),
        t("vir02", 2, 2, true, "2 AI cores, 2 AI CPUs"),
        t("vir02_1c", 2, 1, false, "2 AI cores, 1 AI CPU"),
        t("vir04", 4, 4, false, "4 AI cores, 4 AI CPUs"),
        t("vir04_3c", 4, 3, false, "4 AI cores, 3 AI CPUs"),
        t(
            "vir04_3c_ndvpp",
            4,
            3,
            false,
            "4 AI cores, 3 AI CPUs, no DVPP",
        ),
        t(
            "vir04_4c_dvpp",
            4,
            4,
            false,
            "4 AI cores, 4 AI CPUs, all DVPP",
        ),
    ],
};

/// The vNPU table of a chip, by DCMI's chip_name ("910", "310P3", ...).
/// 910B/910_93 and other chips have none here: no partitioning claimed.
pub fn spec_for(chip_name: &str) -> Option<&'static ChipSpec> {
    let n = chip_name.trim().to_ascii_uppercase();
    if n.starts_with("310P") {
        Some(&ASCEND_310P)
    } else if n == "910" || n.starts_with("910A") || n.starts_with("910PRO") {
        Some(&ASCEND_910)
    } else {
        None
    }
}

/// The most vNPUs a device can hold: by its smallest template, at most
/// DCMI_MAX_VDEV_NUM.
pub fn max_partitions(dev_aicore: u32, spec: Option<&ChipSpec>) -> u32 {
    spec.and_then(|s| s.templates.iter().map(|t| t.aicore).min())
        .map_or(0, |m| (dev_aicore / m.max(1)).min(MAX_VDEVS))
}
