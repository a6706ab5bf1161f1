//! The general capabilities the simulated firmware reports (QUERY_HCA_CAP, max and current)
//! and what SET_HCA_CAP may change. Values describe a single-function ConnectX-5 PF in
//! InfiniBand mode as far as the model implements it: UD, QP0 and QP1 only, no SRQ, no memory
//! keys (buffers use the reserved lkey), no RoCE, no atomics.

use firmware_cmds::mlx5::bits::Field;
use firmware_cmds::mlx5::caps::{HcaCaps, field, port_type};

use super::config::{LOG_BF_REG_SIZE, Mlx5Config};

/// The maximum capability page.
pub(crate) fn max_caps(cfg: &Mlx5Config) -> HcaCaps {
    let mut c = HcaCaps::zeroed();
    let set = |c: &mut HcaCaps, f: Field, v: u32| {
        // Every value below fits its field; a failure would be a bug in this table.
        c.set(f, v).expect("capability value fits its field");
    };
    set(&mut c, field::LOG_MAX_QP_SZ, 15);
    set(&mut c, field::LOG_MAX_QP, 18);
    set(&mut c, field::LOG_MAX_CQ_SZ, 22);
    set(&mut c, field::LOG_MAX_CQ, 16);
    set(&mut c, field::LOG_MAX_EQ_SZ, 22);
    set(&mut c, field::LOG_MAX_EQ, 6);
    set(&mut c, field::LOG_MAX_MKEY, 0);
    set(&mut c, field::LOG_MAX_PD, 16);
    set(&mut c, field::LOG_MAX_MSG, 30);
    set(&mut c, field::GID_TABLE_SIZE, 8);
    // 128 P_Keys (code 0), the table size the kernel asks for.
    set(&mut c, field::PKEY_TABLE_SIZE, 0);
    set(&mut c, field::PORT_TYPE, port_type::IB);
    set(&mut c, field::NUM_PORTS, cfg.ports.into());
    set(&mut c, field::CQE_VERSION, 1);
    set(&mut c, field::CMDIF_CHECKSUM, 3);
    set(&mut c, field::LOG_PG_SZ, 12);
    set(&mut c, field::LOG_BF_REG_SIZE, LOG_BF_REG_SIZE);
    set(&mut c, field::MAX_WQE_SZ_SQ, 1024);
    set(&mut c, field::MAX_WQE_SZ_RQ, 512);
    set(&mut c, field::LOG_UAR_PAGE_SZ, 0);
    set(&mut c, field::NUM_OF_UARS_PER_PAGE, 1);
    set(&mut c, field::SQ_TS_FORMAT, cfg.sq_ts_format);
    for f in [
        field::EVENT_CAP,
        field::FORCE_TEARDOWN,
        field::NULL_MKEY,
        field::CACHE_LINE_128BYTE,
        field::VPORT_GROUP_MANAGER,
        field::CQ_OI,
        field::SET_DETH_SQPN,
        field::UD,
        field::UAR_4K,
        field::BF,
        field::SW_OWNER_ID,
    ] {
        set(&mut c, f, 1);
    }
    c
}

/// The current page at power-on: the maximum, with command checksums off, 4 KiB UARs not
/// forced and a 64-byte cache line, as firmware starts before the driver's SET_HCA_CAP.
pub(crate) fn initial_current(max: &HcaCaps) -> HcaCaps {
    let mut c = max.clone();
    for (f, v) in [
        (field::CMDIF_CHECKSUM, 0),
        (field::UAR_4K, 0),
        (field::CACHE_LINE_128BYTE, 0),
    ] {
        c.set(f, v).expect("capability value fits its field");
    }
    c
}

/// A SET_HCA_CAP field the firmware takes from the driver, and how it is bounded.
struct Settable {
    field: Field,
    /// The driver's value must not exceed the maximum page's (log sizes, codes).
    bounded_by_max: bool,
    /// A flag: it may only be set when the maximum page sets it.
    flag: bool,
}

const SETTABLE: &[Settable] = &[
    Settable {
        field: field::LOG_MAX_QP,
        bounded_by_max: true,
        flag: false,
    },
    Settable {
        field: field::PKEY_TABLE_SIZE,
        bounded_by_max: true,
        flag: false,
    },
    Settable {
        field: field::CMDIF_CHECKSUM,
        bounded_by_max: true,
        flag: false,
    },
    Settable {
        field: field::LOG_UAR_PAGE_SZ,
        bounded_by_max: false,
        flag: false,
    },
    Settable {
        field: field::UAR_4K,
        bounded_by_max: false,
        flag: true,
    },
    Settable {
        field: field::CACHE_LINE_128BYTE,
        bounded_by_max: false,
        flag: true,
    },
];

/// Largest `log_uar_page_sz` the model accepts (64 KiB pages).
const MAX_LOG_UAR_PAGE_SZ: u32 = 4;

/// Applies a SET_HCA_CAP general page to `cur`: only the settable fields are taken, every one
/// bounded by `max`. On a bad value nothing changes and the offending field's name is returned
/// (the firmware answers BAD_PARAM).
pub(crate) fn apply_set(
    cur: &mut HcaCaps,
    max: &HcaCaps,
    req: &HcaCaps,
) -> Result<(), &'static str> {
    for s in SETTABLE {
        let want = req.get(s.field).unwrap_or(0);
        let limit = max.get(s.field).unwrap_or(0);
        let ok = if s.flag {
            want == 0 || limit != 0
        } else if s.bounded_by_max {
            want <= limit
        } else {
            want <= MAX_LOG_UAR_PAGE_SZ
        };
        if !ok {
            return Err(s.field.name);
        }
    }
    for s in SETTABLE {
        let want = req.get(s.field).unwrap_or(0);
        cur.set(s.field, want).map_err(|_| s.field.name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_takes_only_settable_fields_within_max() {
        let cfg = Mlx5Config::default();
        let max = max_caps(&cfg);
        let mut cur = initial_current(&max);
        let mut req = cur.clone();
        req.set_cmdif_checksum(3).unwrap();
        req.set_num_ports(7).unwrap();
        req.set_log_max_qp(10).unwrap();
        apply_set(&mut cur, &max, &req).unwrap();
        assert_eq!(cur.cmdif_checksum(), 3);
        assert_eq!(cur.log_max_qp(), 10);
        assert_eq!(cur.num_ports(), 1, "num_ports is not settable");

        let mut bad = cur.clone();
        bad.set_log_max_qp(19).unwrap();
        assert_eq!(apply_set(&mut cur, &max, &bad), Err("log_max_qp"));
        assert_eq!(cur.log_max_qp(), 10, "a rejected page changes nothing");
    }
}
