//! Parsing what the kernel's INFO ioctls return: the fixed structs and their capability chains
//! (region info with sparse-mmap / MSI-X-mappable / type caps; type1 IOMMU info with the
//! IOVA-range and DMA-available caps).
//!
//! The kernel's answer is input like any other: every offset is bounds-checked, a chain that
//! loops or points outside the buffer is an error, never a panic or an endless walk.

use std::mem::{offset_of, size_of};

use dma::IovaRange;
use vfio_bindings::bindings::vfio as b;

use super::ioctl::{u32_at, u64_at};
use crate::backend::{MmapArea, RegionInfo};

/// One capability in a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap<'a> {
    /// Capability ID (meaning depends on the INFO it came with).
    pub id: u16,
    /// Capability version.
    pub version: u16,
    /// Offset of its header in the buffer.
    pub offset: usize,
    /// Its bytes, header included: up to the next capability's header, or to the end of
    /// the buffer for the last one (its exact length is its parser's business).
    pub data: &'a [u8],
}

const HEADER: usize = size_of::<b::vfio_info_cap_header>();

/// Alignment of every capability header. The kernel appends each capability at the end of
/// the chain (`vfio_info_cap_add`, vfio_main.c) and newer kernels round each size up to 8;
/// older ones did not round, but every capability struct is a multiple of 4 bytes.
const CAP_ALIGN: usize = 4;

/// Walk the chain that starts at `first` (0: no capabilities). Capabilities live after the
/// fixed struct, so an offset below `fixed_len` is as wrong as one past the end.
///
/// The kernel only appends (`vfio_info_cap_add`) and shifts every link by the same amount
/// (`vfio_info_cap_shift`), so a real chain only goes forward, each header past the one
/// before: anything else is refused, which also rules out loops, in one linear pass.
pub fn walk(buf: &[u8], first: u32, fixed_len: usize) -> Result<Vec<Cap<'_>>, String> {
    let mut caps: Vec<Cap<'_>> = Vec::new();
    let mut next = first as usize;
    // The lowest offset the next header may start at.
    let mut lowest = fixed_len;
    while next != 0 {
        if next < lowest {
            return Err(match caps.last() {
                None => format!(
                    "capability at offset {next:#x} overlaps the {fixed_len}-byte fixed part"
                ),
                Some(prev) => format!(
                    "capability at offset {:#x} links back to offset {next:#x}, not past its \
                     own {HEADER}-byte header: kernel chains only go forward (a loop or overlap)",
                    prev.offset
                ),
            });
        }
        if next.checked_add(HEADER).is_none_or(|end| end > buf.len()) {
            return Err(format!(
                "capability header at offset {next:#x} runs past the end of the {}-byte buffer",
                buf.len()
            ));
        }
        if next % CAP_ALIGN != 0 {
            return Err(format!(
                "capability at offset {next:#x} is not {CAP_ALIGN}-byte aligned"
            ));
        }
        lowest = next + HEADER;
        let data = &buf[next..];
        caps.push(Cap {
            id: u16::from_ne_bytes([data[0], data[1]]),
            version: u16::from_ne_bytes([data[2], data[3]]),
            offset: next,
            data,
        });
        next = u32_at(data, offset_of!(b::vfio_info_cap_header, next)) as usize;
    }
    // A capability ends where the next one starts (the chain was checked to go forward), so
    // no parser reads the next capability's bytes as its own.
    for i in 1..caps.len() {
        let (start, end) = (caps[i - 1].offset, caps[i].offset);
        caps[i - 1].data = &buf[start..end];
    }
    Ok(caps)
}

/// Read the `count`-element array of 16-byte `{u64, u64}` pairs that follows a cap's 16-byte
/// head (the shape of both the sparse-mmap areas and the IOVA ranges).
fn pairs(cap: &Cap<'_>, what: &str) -> Result<Vec<(u64, u64)>, String> {
    const HEAD: usize = 16;
    if cap.data.len() < HEAD {
        return Err(format!(
            "{what} capability at {:#x} is cut short ({} bytes)",
            cap.offset,
            cap.data.len()
        ));
    }
    let count = u32_at(cap.data, 8) as usize;
    let need = count
        .checked_mul(16)
        .and_then(|n| n.checked_add(HEAD))
        .ok_or_else(|| format!("{what} capability claims {count} entries"))?;
    if need > cap.data.len() {
        return Err(format!(
            "{what} capability at {:#x} claims {count} entries ({need} bytes) but holds only {} bytes",
            cap.offset,
            cap.data.len()
        ));
    }
    Ok((0..count)
        .map(|i| {
            let at = HEAD + i * 16;
            (u64_at(cap.data, at), u64_at(cap.data, at + 8))
        })
        .collect())
}

/// Everything the backend keeps about one region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDetails {
    /// What [`crate::DeviceBackend::region_info`] reports.
    pub info: RegionInfo,
    /// Where the region is on the device fd, for pread/pwrite and mmap.
    pub file_offset: u64,
    /// The region's type and subtype, for device-specific regions (`CAP_TYPE`).
    pub region_type: Option<(u32, u32)>,
}

/// Parse a `VFIO_DEVICE_GET_REGION_INFO` answer for region `index`.
pub fn parse_region_info(buf: &[u8], index: u32) -> Result<RegionDetails, String> {
    let fixed = size_of::<b::vfio_region_info>();
    if buf.len() < fixed {
        return Err(format!(
            "region info of {} bytes, expected {fixed}",
            buf.len()
        ));
    }
    let flags = u32_at(buf, offset_of!(b::vfio_region_info, flags));
    let got_index = u32_at(buf, offset_of!(b::vfio_region_info, index));
    if got_index != index {
        return Err(format!("asked for region {index}, got region {got_index}"));
    }
    let size = u64_at(buf, offset_of!(b::vfio_region_info, size));
    let file_offset = u64_at(buf, offset_of!(b::vfio_region_info, offset));
    // Every access adds an offset inside the region to `file_offset`; the kernel's file
    // offsets are `loff_t`, signed 64-bit. Checked once here, those sums cannot overflow.
    if file_offset
        .checked_add(size)
        .is_none_or(|end| end > i64::MAX.unsigned_abs())
    {
        return Err(format!(
            "region {index} at file offset {file_offset:#x} with {size:#x} bytes ends past the \
             largest file offset ({:#x})",
            i64::MAX
        ));
    }
    let cap_offset = u32_at(buf, offset_of!(b::vfio_region_info, cap_offset));
    let mut info = RegionInfo {
        index,
        size,
        read: flags & b::VFIO_REGION_INFO_FLAG_READ != 0,
        write: flags & b::VFIO_REGION_INFO_FLAG_WRITE != 0,
        mmap: flags & b::VFIO_REGION_INFO_FLAG_MMAP != 0,
        msix_mappable: false,
        sparse: None,
    };
    let mut region_type = None;
    if flags & b::VFIO_REGION_INFO_FLAG_CAPS != 0 {
        if cap_offset == 0 {
            return Err("capabilities announced but none delivered".into());
        }
        for cap in walk(buf, cap_offset, fixed)? {
            match u32::from(cap.id) {
                b::VFIO_REGION_INFO_CAP_SPARSE_MMAP => {
                    if info.sparse.is_some() {
                        return Err("two sparse-mmap capabilities".into());
                    }
                    info.sparse = Some(sparse_areas(&cap, size)?);
                }
                b::VFIO_REGION_INFO_CAP_MSIX_MAPPABLE => info.msix_mappable = true,
                b::VFIO_REGION_INFO_CAP_TYPE => {
                    if cap.data.len() < size_of::<b::vfio_region_info_cap_type>() {
                        return Err("type capability cut short".into());
                    }
                    region_type = Some((
                        u32_at(cap.data, offset_of!(b::vfio_region_info_cap_type, type_)),
                        u32_at(cap.data, offset_of!(b::vfio_region_info_cap_type, subtype)),
                    ));
                }
                other => tracing::debug!(index, cap = other, "ignoring a region capability"),
            }
        }
    }
    Ok(RegionDetails {
        info,
        file_offset,
        region_type,
    })
}

/// The sparse-mmap areas, checked: non-empty, inside the region, not overlapping; sorted.
fn sparse_areas(cap: &Cap<'_>, region_size: u64) -> Result<Vec<MmapArea>, String> {
    let mut areas: Vec<MmapArea> = pairs(cap, "sparse-mmap")?
        .into_iter()
        .map(|(offset, size)| MmapArea { offset, size })
        .collect();
    for a in &areas {
        if a.size == 0 {
            return Err(format!("sparse-mmap area at {:#x} is empty", a.offset));
        }
        if a.offset
            .checked_add(a.size)
            .is_none_or(|end| end > region_size)
        {
            return Err(format!(
                "sparse-mmap area {:#x}+{:#x} lies outside the {region_size:#x}-byte region",
                a.offset, a.size
            ));
        }
    }
    areas.sort_by_key(|a| a.offset);
    for w in areas.windows(2) {
        if w[0].offset + w[0].size > w[1].offset {
            return Err(format!(
                "sparse-mmap areas at {:#x} and {:#x} overlap",
                w[0].offset, w[1].offset
            ));
        }
    }
    Ok(areas)
}

/// What `VFIO_IOMMU_GET_INFO` says about the container's IOMMU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IommuInfo {
    /// Supported IOMMU page sizes as a bitmap (bit n: 2^n bytes), when reported.
    pub pgsizes: Option<u64>,
    /// The IOVA ranges mappings must lie in (kernel ≥ 5.4), sorted and disjoint.
    pub iova_ranges: Option<Vec<IovaRange>>,
    /// How many more DMA mappings the container accepts (kernel ≥ 5.10).
    pub dma_avail: Option<u32>,
}

/// Parse a `VFIO_IOMMU_GET_INFO` answer.
pub fn parse_iommu_info(buf: &[u8]) -> Result<IommuInfo, String> {
    let fixed = size_of::<b::vfio_iommu_type1_info>();
    // Kernels before the capability chain return only up to `iova_pgsizes`.
    let min = offset_of!(b::vfio_iommu_type1_info, cap_offset);
    if buf.len() < min {
        return Err(format!(
            "IOMMU info of {} bytes, expected {fixed}",
            buf.len()
        ));
    }
    let flags = u32_at(buf, offset_of!(b::vfio_iommu_type1_info, flags));
    let pgsizes = (flags & b::VFIO_IOMMU_INFO_PGSIZES != 0)
        .then(|| u64_at(buf, offset_of!(b::vfio_iommu_type1_info, iova_pgsizes)));
    let mut info = IommuInfo {
        pgsizes,
        iova_ranges: None,
        dma_avail: None,
    };
    if flags & b::VFIO_IOMMU_INFO_CAPS == 0 {
        return Ok(info);
    }
    if buf.len() < fixed {
        return Err("capabilities announced in a buffer without cap_offset".into());
    }
    let cap_offset = u32_at(buf, offset_of!(b::vfio_iommu_type1_info, cap_offset));
    if cap_offset == 0 {
        return Err("capabilities announced but none delivered".into());
    }
    for cap in walk(buf, cap_offset, fixed)? {
        match u32::from(cap.id) {
            b::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                if info.iova_ranges.is_some() {
                    return Err("two IOVA-range capabilities".into());
                }
                info.iova_ranges = Some(iova_ranges(&cap)?);
            }
            b::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => {
                if cap.data.len() < size_of::<b::vfio_iommu_type1_info_dma_avail>() {
                    return Err("DMA-available capability cut short".into());
                }
                info.dma_avail = Some(u32_at(
                    cap.data,
                    offset_of!(b::vfio_iommu_type1_info_dma_avail, avail),
                ));
            }
            other => tracing::debug!(cap = other, "ignoring an IOMMU capability"),
        }
    }
    Ok(info)
}

/// The IOVA ranges, checked: at least one, each `start <= end`, disjoint; sorted.
fn iova_ranges(cap: &Cap<'_>) -> Result<Vec<IovaRange>, String> {
    let mut ranges: Vec<IovaRange> = pairs(cap, "IOVA-range")?
        .into_iter()
        .map(|(start, end)| IovaRange::new(start, end))
        .collect();
    if ranges.is_empty() {
        return Err("the IOVA-range capability lists no range".into());
    }
    if let Some(r) = ranges.iter().find(|r| r.end < r.start) {
        return Err(format!("IOVA range {r:?} ends before it starts"));
    }
    ranges.sort();
    for w in ranges.windows(2) {
        if w[0].end >= w[1].start {
            return Err(format!("IOVA ranges {:?} and {:?} overlap", w[0], w[1]));
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer builder: the kernel's layouts written out by hand (little-endian hosts).
    struct Buf(Vec<u8>);

    impl Buf {
        fn new(len: usize) -> Self {
            Buf(vec![0; len])
        }
        fn u16(mut self, at: usize, v: u16) -> Self {
            self.0[at..at + 2].copy_from_slice(&v.to_ne_bytes());
            self
        }
        fn u32(mut self, at: usize, v: u32) -> Self {
            self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
            self
        }
        fn u64(mut self, at: usize, v: u64) -> Self {
            self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
            self
        }
        /// A cap header: id at +0, version at +2, next at +4.
        fn cap(self, at: usize, id: u16, version: u16, next: u32) -> Self {
            self.u16(at, id).u16(at + 2, version).u32(at + 4, next)
        }
    }

    /// Region info (32 bytes: argsz, flags, index, cap_offset, size@16, offset@24).
    fn region(len: usize, flags: u32, index: u32, cap: u32, size: u64, off: u64) -> Buf {
        Buf::new(len)
            .u32(0, len as u32)
            .u32(4, flags)
            .u32(8, index)
            .u32(12, cap)
            .u64(16, size)
            .u64(24, off)
    }

    #[test]
    fn walks_a_good_chain() {
        let buf = Buf::new(64).cap(24, 3, 1, 40).cap(40, 1, 2, 0).0;
        let caps = walk(&buf, 24, 24).unwrap();
        let ids: Vec<_> = caps.iter().map(|c| (c.id, c.version, c.offset)).collect();
        assert_eq!(ids, vec![(3, 1, 24), (1, 2, 40)]);
        assert!(walk(&buf, 0, 24).unwrap().is_empty());
    }

    #[test]
    fn rejects_loops() {
        let self_loop = Buf::new(48).cap(24, 1, 1, 24).0;
        assert!(
            walk(&self_loop, 24, 24)
                .unwrap_err()
                .contains("offset 0x18 links back to offset 0x18")
        );
        let two_loop = Buf::new(64).cap(24, 1, 1, 40).cap(40, 2, 1, 24).0;
        assert!(walk(&two_loop, 24, 24).unwrap_err().contains("links back"));
    }

    #[test]
    fn rejects_a_chain_that_goes_backwards_or_overlaps() {
        // 56 -> 32 -> end: no loop, but the kernel never links backwards.
        let backwards = Buf::new(64).cap(56, 1, 1, 32).cap(32, 2, 1, 0).0;
        assert!(
            walk(&backwards, 56, 32)
                .unwrap_err()
                .contains("offset 0x38 links back to offset 0x20")
        );
        // The second header would start inside the first.
        let overlapping = Buf::new(64).cap(32, 1, 1, 36).0;
        assert!(
            walk(&overlapping, 32, 32)
                .unwrap_err()
                .contains("links back to offset 0x24")
        );
        // A header right after the previous one is fine; a misaligned one is not.
        let packed = Buf::new(64).cap(32, 1, 1, 40).cap(40, 2, 1, 0).0;
        assert_eq!(walk(&packed, 32, 32).unwrap().len(), 2);
        let misaligned = Buf::new(64).cap(32, 1, 1, 42).0;
        assert!(
            walk(&misaligned, 32, 32)
                .unwrap_err()
                .contains("0x2a is not 4-byte aligned")
        );
    }

    #[test]
    fn walks_the_longest_chain_the_buffer_limit_allows() {
        // The largest info buffer accepted, holding one 8-byte header after another: every
        // capability is visited once.
        let len = super::super::ioctl::MAX_INFO_BYTES;
        let fixed = 32;
        let mut buf = Buf::new(len);
        let mut at = fixed;
        while at + HEADER <= len {
            let next = if at + 2 * HEADER <= len {
                at + HEADER
            } else {
                0
            };
            buf = buf.cap(at, 1, 1, u32::try_from(next).unwrap());
            at += HEADER;
        }
        let caps = walk(&buf.0, 32, fixed).unwrap();
        assert_eq!(caps.len(), (len - fixed) / HEADER);
        assert_eq!(caps.last().unwrap().offset, len - HEADER);
    }

    #[test]
    fn rejects_out_of_bounds_offsets() {
        let buf = Buf::new(48).cap(24, 1, 1, 44).0;
        // 44 + 8 > 48: the second header would run past the end.
        assert!(
            walk(&buf, 24, 24)
                .unwrap_err()
                .contains("runs past the end of the 48-byte")
        );
        assert!(
            walk(&buf, 4096, 24)
                .unwrap_err()
                .contains("runs past the end")
        );
        assert!(
            walk(&buf, u32::MAX, 24)
                .unwrap_err()
                .contains("runs past the end")
        );
        // Into the fixed part.
        assert!(
            walk(&buf, 8, 24)
                .unwrap_err()
                .contains("overlaps the 24-byte fixed part")
        );
    }

    #[test]
    fn region_without_caps() {
        // edu's BAR0 as observed in the QEMU guest: flags 0x7, size 1 MiB, offset 0.
        let buf = region(32, 0x7, 0, 0, 0x100000, 0).0;
        let r = parse_region_info(&buf, 0).unwrap();
        assert_eq!(
            r.info,
            RegionInfo {
                index: 0,
                size: 0x100000,
                read: true,
                write: true,
                mmap: true,
                msix_mappable: false,
                sparse: None
            }
        );
        assert_eq!(r.file_offset, 0);
        // edu's config region: flags 0x3, size 0x100, offset 7 << 40.
        let buf = region(32, 0x3, 7, 0, 0x100, 0x700_0000_0000).0;
        let r = parse_region_info(&buf, 7).unwrap();
        assert!(!r.info.mmap && r.info.read && r.info.write);
        assert_eq!(r.file_offset, 7 << 40);
    }

    #[test]
    fn region_with_sparse_and_type_caps() {
        // A 32 MiB BAR whose MSI-X table page (at 0x2000) may not be mapped.
        let size = 32 << 20;
        let buf = region(32 + 48 + 16, 0xf, 0, 32, size, 0)
            .cap(32, 1, 1, 80)
            .u32(40, 2) // nr_areas
            .u64(48, 0x3000) // listed out of order on purpose
            .u64(56, size - 0x3000)
            .u64(64, 0)
            .u64(72, 0x2000)
            .cap(80, 2, 1, 0)
            .u32(88, 0x8000_0000 | 0x15b3)
            .u32(92, 1)
            .0;
        let r = parse_region_info(&buf, 0).unwrap();
        assert_eq!(
            r.info.sparse,
            Some(vec![
                MmapArea {
                    offset: 0,
                    size: 0x2000
                },
                MmapArea {
                    offset: 0x3000,
                    size: size - 0x3000
                }
            ])
        );
        assert!(!r.info.msix_mappable);
        assert_eq!(r.region_type, Some((0x8000_15b3, 1)));
    }

    #[test]
    fn a_region_ending_past_the_largest_file_offset_is_an_error() {
        for (off, size) in [
            (u64::MAX - 0x10, 0x100),
            (u64::MAX - 0x10, 0),
            (1 << 63, 0x100),
            (0x7fff_ffff_ffff_ff00, 0x101),
        ] {
            let buf = region(32, 0x7, 0, 0, size, off).0;
            let err = parse_region_info(&buf, 0).unwrap_err();
            assert!(
                err.contains("largest file offset"),
                "{off:#x}+{size:#x}: {err}"
            );
        }
        // Ending exactly at the largest offset is fine.
        let buf = region(32, 0x7, 0, 0, 0x100, 0x7fff_ffff_ffff_feff).0;
        assert_eq!(
            parse_region_info(&buf, 0).unwrap().file_offset,
            0x7fff_ffff_ffff_feff
        );
    }

    #[test]
    fn a_capability_ends_where_the_next_one_starts() {
        // A sparse-mmap cap at 32 claims 2 areas (48 bytes, to 80), but the next cap starts
        // at 64: its second area would be read from the next cap's bytes.
        let claims_two = region(96, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 64)
            .u32(40, 2)
            .u64(48, 0)
            .u64(56, 0x1000)
            .cap(64, 2, 1, 0)
            .u32(72, 0x1000)
            .u32(76, 0x1000)
            .0;
        let err = parse_region_info(&claims_two, 0).unwrap_err();
        assert!(
            err.contains("claims 2 entries (48 bytes) but holds only 32 bytes"),
            "{err}"
        );
        // One area fits before the next cap: accepted.
        let claims_one = region(96, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 64)
            .u32(40, 1)
            .u64(48, 0)
            .u64(56, 0x1000)
            .cap(64, 2, 1, 0)
            .u32(72, 0x8000_15b3)
            .u32(76, 1)
            .0;
        let r = parse_region_info(&claims_one, 0).unwrap();
        assert_eq!(
            r.info.sparse,
            Some(vec![MmapArea {
                offset: 0,
                size: 0x1000
            }])
        );
        assert_eq!(r.region_type, Some((0x8000_15b3, 1)));
        // Each cap's bytes run to the next header; the last one's to the end of the buffer.
        let caps = walk(&claims_one, 32, 32).unwrap();
        assert_eq!(
            caps.iter()
                .map(|c| (c.offset, c.data.len()))
                .collect::<Vec<_>>(),
            vec![(32, 32), (64, 32)]
        );
    }

    #[test]
    fn region_with_msix_mappable() {
        let buf = region(40, 0xf, 0, 32, 0x2000000, 0).cap(32, 3, 1, 0).0;
        let r = parse_region_info(&buf, 0).unwrap();
        assert!(r.info.msix_mappable);
        assert_eq!(r.info.sparse, None);
    }

    #[test]
    fn malformed_region_caps_are_errors() {
        // nr_areas claims more entries than the buffer holds.
        let buf = region(64, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 0)
            .u32(40, 1000)
            .0;
        assert!(
            parse_region_info(&buf, 0)
                .unwrap_err()
                .contains("claims 1000 entries")
        );
        // nr_areas so large that the byte count overflows.
        let buf = region(64, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 0)
            .u32(40, u32::MAX)
            .0;
        assert!(parse_region_info(&buf, 0).is_err());
        // An area past the end of the region.
        let buf = region(64, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 0)
            .u32(40, 1)
            .u64(48, 0xf000)
            .u64(56, 0x2000)
            .0;
        assert!(parse_region_info(&buf, 0).unwrap_err().contains("outside"));
        // An area whose end overflows u64.
        let buf = region(64, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 0)
            .u32(40, 1)
            .u64(48, u64::MAX - 1)
            .u64(56, 0x2000)
            .0;
        assert!(parse_region_info(&buf, 0).unwrap_err().contains("outside"));
        // Overlapping areas.
        let buf = region(80, 0xf, 0, 32, 0x10000, 0)
            .cap(32, 1, 1, 0)
            .u32(40, 2)
            .u64(48, 0)
            .u64(56, 0x2000)
            .u64(64, 0x1000)
            .u64(72, 0x1000)
            .0;
        assert!(parse_region_info(&buf, 0).unwrap_err().contains("overlap"));
        // Caps flag without a chain; a chain looping; the wrong index.
        let buf = region(32, 0xf, 0, 0, 0x10000, 0).0;
        assert!(
            parse_region_info(&buf, 0)
                .unwrap_err()
                .contains("none delivered")
        );
        let buf = region(48, 0xf, 0, 32, 0x10000, 0).cap(32, 3, 1, 32).0;
        assert!(parse_region_info(&buf, 0).unwrap_err().contains("loop"));
        let buf = region(32, 0x7, 2, 0, 0x10000, 0).0;
        assert!(
            parse_region_info(&buf, 0)
                .unwrap_err()
                .contains("got region 2")
        );
        assert!(parse_region_info(&buf[..16], 0).is_err());
    }

    /// IOMMU info (24 bytes: argsz, flags, pgsizes@8, cap_offset@16).
    fn iommu(len: usize, flags: u32, pgsizes: u64, cap: u32) -> Buf {
        Buf::new(len)
            .u32(0, len as u32)
            .u32(4, flags)
            .u64(8, pgsizes)
            .u32(16, cap)
    }

    #[test]
    fn iommu_info_as_observed_under_qemu_vtd() {
        // vfio-userspace.md §1.5: pgsizes 0x40201000, ranges [0, 0xfedfffff] and
        // [0xfef00000, 0x7fffffffff], dma_avail 65535.
        let buf = iommu(24 + 48 + 12 + 4, 0x3, 0x40201000, 24)
            .cap(24, 1, 1, 72)
            .u32(32, 2)
            .u64(40, 0)
            .u64(48, 0xfedf_ffff)
            .u64(56, 0xfef0_0000)
            .u64(64, 0x7f_ffff_ffff)
            .cap(72, 3, 1, 0)
            .u32(80, 65535)
            .0;
        let info = parse_iommu_info(&buf).unwrap();
        assert_eq!(info.pgsizes, Some(0x40201000));
        assert_eq!(
            info.iova_ranges,
            Some(vec![
                IovaRange::new(0, 0xfedf_ffff),
                IovaRange::new(0xfef0_0000, 0x7f_ffff_ffff)
            ])
        );
        assert_eq!(info.dma_avail, Some(65535));
    }

    #[test]
    fn iommu_info_from_an_old_kernel() {
        // Before 5.4: 16 bytes, no caps.
        let buf = iommu(24, 0x1, 0x1000, 0).0;
        let info = parse_iommu_info(&buf[..16]).unwrap();
        assert_eq!(info.pgsizes, Some(0x1000));
        assert_eq!(info.iova_ranges, None);
        assert_eq!(info.dma_avail, None);
    }

    #[test]
    fn malformed_iova_ranges_are_errors() {
        let one = |start: u64, end: u64| {
            iommu(56, 0x3, 0x1000, 24)
                .cap(24, 1, 1, 0)
                .u32(32, 1)
                .u64(40, start)
                .u64(48, end)
                .0
        };
        assert!(
            parse_iommu_info(&one(0x2000, 0x1000))
                .unwrap_err()
                .contains("ends before")
        );
        let none = iommu(40, 0x3, 0x1000, 24).cap(24, 1, 1, 0).u32(32, 0).0;
        assert!(parse_iommu_info(&none).unwrap_err().contains("no range"));
        let overlap = iommu(72, 0x3, 0x1000, 24)
            .cap(24, 1, 1, 0)
            .u32(32, 2)
            .u64(40, 0)
            .u64(48, 0x2000)
            .u64(56, 0x2000)
            .u64(64, 0x3000)
            .0;
        assert!(parse_iommu_info(&overlap).unwrap_err().contains("overlap"));
        let cut = iommu(40, 0x3, 0x1000, 24).cap(24, 1, 1, 0).u32(32, 1).0;
        assert!(
            parse_iommu_info(&cut)
                .unwrap_err()
                .contains("holds only 16 bytes")
        );
        let avail_cut = iommu(32, 0x3, 0x1000, 24).cap(24, 3, 1, 0).0;
        assert!(
            parse_iommu_info(&avail_cut)
                .unwrap_err()
                .contains("cut short")
        );
        let looped = iommu(48, 0x3, 0x1000, 24).cap(24, 3, 1, 24).0;
        assert!(parse_iommu_info(&looped).unwrap_err().contains("loop"));
        let oob = iommu(24, 0x3, 0x1000, 0x100).0;
        assert!(parse_iommu_info(&oob).unwrap_err().contains("past the end"));
    }
}
