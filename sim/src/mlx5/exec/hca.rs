//! The HCA's life cycle and identity: ENABLE/DISABLE_HCA, INIT/TEARDOWN_HCA, QUERY/SET_ISSI,
//! QUERY/SET_HCA_CAP, ACCESS_REG and QUERY_SPECIAL_CONTEXTS.

use firmware_cmds::mlx5::caps::{CapType, GENERAL_CAP_LEN};
use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::ops::access_reg::{
    AccessReg, AccessRegOut, HOST_ENDIANNESS_LEN, Pcap, REG_HOST_ENDIANNESS, REG_PCAP, RegAccess,
};
use firmware_cmds::mlx5::ops::hca::{
    DisableHca, EnableHca, InitHca, TeardownHca, TeardownHcaOut, TeardownProfile,
};
use firmware_cmds::mlx5::ops::hca_cap::{
    CAPABILITY_OFFSET, CapMode, HCA_CAP_LONG_LEN, QueryHcaCap, QueryHcaCapOut, SetHcaCap,
};
use firmware_cmds::mlx5::ops::issi::{QueryIssi, QueryIssiOut, SetIssi};
use firmware_cmds::mlx5::ops::special_contexts::{QuerySpecialContexts, SpecialContexts};
use firmware_cmds::mlx5::ops::{Command, CommandOutput, NoPayload};

use super::{Exec, Failure, decode_failure, encoded, synd};
use crate::mlx5::caps;
use crate::mlx5::config::special_keys;
use crate::mlx5::state::{Phase, State};

type Out = Result<Vec<u8>, Failure>;

fn decode<C: Command>(input: &[u8]) -> Result<C, Failure> {
    C::decode(input).map_err(|e| decode_failure(&e))
}

fn ok<O: CommandOutput>(o: &O) -> Out {
    encoded(o.encode())
}

fn bad_param(s: u32) -> Failure {
    (CmdStatus::BAD_PARAM_ERR, s)
}

/// The function's own id and embedded-CPU flag: 0, with the flag exactly when the function
/// is an ECPF (`initializing` bit 23). On an ECPF, function 0 without the flag names the host
/// PF (the kernel's `func_id_to_type`), which the model does not have: a driver that forgets
/// the flag there is refused rather than silently served.
fn own_function(st: &State, function_id: u16, ecpu: bool) -> Result<(), Failure> {
    if function_id != 0 || ecpu != st.cfg.embedded_cpu {
        return Err(bad_param(synd::FUNCTION));
    }
    Ok(())
}

pub(super) fn enable_hca(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: EnableHca = decode(input)?;
    own_function(st, c.function_id, c.embedded_cpu_function)?;
    st.phase = Phase::Enabled;
    ok(&NoPayload::<{ firmware_cmds::mlx5::ops::hca::ENABLE_HCA_OUT_LEN }>)
}

/// A command whose completion was withheld or corrupted still had its memory until now (the
/// close of the HCA, whichever of TEARDOWN_HCA and DISABLE_HCA comes first): read it once
/// more, so that memory the driver released early faults in the IOMMU. The mailboxes of
/// commands it lost are read the same way, and the commands are forgotten with the HCA: they
/// can no longer run late.
fn touch_unsettled_memory(st: &mut State) {
    let lost = std::mem::take(&mut st.faults.lost);
    let mut addrs = std::mem::take(&mut st.faults.unsettled_memory);
    addrs.extend(lost.into_iter().flat_map(|l| l.kept));
    for addr in addrs {
        let mut b = [0u8; 8];
        if !crate::mlx5::buffer::read(&st.iommu, addr, &mut b) {
            st.counters.snap.dma_errors += 1;
        }
    }
}

pub(super) fn disable_hca(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DisableHca = decode(input)?;
    own_function(st, c.function_id, c.embedded_cpu_function)?;
    touch_unsettled_memory(st);
    st.drop_resources();
    st.phase = Phase::Disabled;
    st.pages.need = 0;
    ok(&NoPayload::<{ firmware_cmds::mlx5::ops::hca::ENABLE_HCA_OUT_LEN }>)
}

pub(super) fn init_hca(st: &mut State, input: &[u8], _: u32) -> Out {
    let _: InitHca = decode(input)?;
    let need = u64::from(st.cfg.boot_pages) + u64::from(st.cfg.init_pages);
    if st.pages.held_by(st.pages.own) < need {
        return Err((CmdStatus::NO_RES_ERR, synd::NOT_ENOUGH_PAGES));
    }
    st.pages.need = need;
    st.phase = Phase::Initialized;
    ok(&NoPayload::<{ firmware_cmds::mlx5::ops::hca::HCA_OUT_LEN }>)
}

pub(super) fn teardown_hca(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: TeardownHca = decode(input)?;
    // The caps do not offer fast teardown (no NIC-interface handshake in the model).
    if c.profile == TeardownProfile::PrepareFastTeardown && !st.caps_cur.fast_teardown() {
        return Err(bad_param(synd::BAD_CODE));
    }
    touch_unsettled_memory(st);
    // Both profiles close everything: whatever the driver left open is gone with the HCA.
    st.drop_resources();
    st.phase = Phase::TornDown;
    st.pages.need = 0;
    st.pages.request = 0;
    ok(&TeardownHcaOut {
        force_state_fail: false,
    })
}

pub(super) fn query_issi(st: &mut State, input: &[u8], _: u32) -> Out {
    let _: QueryIssi = decode(input)?;
    ok(&QueryIssiOut {
        current_issi: st.issi,
        supported_issi_dw0: st.cfg.supported_issi,
    })
}

pub(super) fn set_issi(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: SetIssi = decode(input)?;
    // ISSI 0 always (a firmware reporting no ISSI speaks 0); 1 only when reported.
    let offered = st.cfg.supported_issi | 1;
    if c.current_issi > 1 || offered & (1 << c.current_issi) == 0 {
        return Err(bad_param(synd::ISSI));
    }
    st.issi = c.current_issi;
    ok(&NoPayload::<{ firmware_cmds::mlx5::ops::issi::ISSI_LEN }>)
}

pub(super) fn query_hca_cap(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: QueryHcaCap = decode(input)?;
    if c.other_function || c.function_id != 0 {
        return Err(bad_param(synd::FUNCTION));
    }
    if c.cap_type != CapType::GENERAL {
        return Err(bad_param(synd::CAP_TYPE));
    }
    let caps = match c.mode {
        CapMode::Max => st.caps_max.clone(),
        CapMode::Current => st.caps_cur.clone(),
    };
    ok(&QueryHcaCapOut { caps })
}

pub(super) fn set_hca_cap(st: &mut State, input: &[u8], _: u32) -> Out {
    // Firmware takes a page shorter than the 4 KiB union as long as the general caps are in
    // it (observed on hardware); pad it for the decoder.
    let padded;
    let input =
        if input.len() >= CAPABILITY_OFFSET + GENERAL_CAP_LEN && input.len() < HCA_CAP_LONG_LEN {
            let mut p = input.to_vec();
            p.resize(HCA_CAP_LONG_LEN, 0);
            padded = p;
            &padded[..]
        } else {
            input
        };
    let c: SetHcaCap = decode(input)?;
    if c.other_function || c.function_id != 0 {
        return Err(bad_param(synd::FUNCTION));
    }
    if c.cap_type != CapType::GENERAL {
        return Err(bad_param(synd::CAP_TYPE));
    }
    caps::apply_set(&mut st.caps_cur, &st.caps_max, &c.caps)
        .map_err(|_| bad_param(synd::CAP_VALUE))?;
    ok(&NoPayload::<{ firmware_cmds::mlx5::ops::hca_cap::HCA_CAP_SHORT_LEN }>)
}

/// ACCESS_REG: HOST_ENDIANNESS (kept), and PCAP, whose write sets the port's capability
/// mask (through the fabric, outside the device lock) and whose read returns it.
pub(super) fn access_reg(st: &mut State, input: &[u8], _: u32) -> Exec {
    let c: AccessReg = match decode(input) {
        Ok(c) => c,
        Err((s, y)) => return Exec::Fail(s, y),
    };
    match c.register_id {
        REG_HOST_ENDIANNESS => super::done(host_endianness(st, &c)),
        REG_PCAP => pcap(st, &c),
        _ => Exec::Fail(CmdStatus::BAD_PARAM_ERR, synd::REGISTER),
    }
}

fn host_endianness(st: &mut State, c: &AccessReg) -> Out {
    if c.data.len() < HOST_ENDIANNESS_LEN {
        return Err((CmdStatus::BAD_INP_LEN_ERR, synd::INPUT_SHORT));
    }
    if c.access == RegAccess::Write {
        st.host_endianness = c.data[0];
    }
    let mut data = vec![0u8; HOST_ENDIANNESS_LEN];
    data[0] = st.host_endianness;
    ok(&AccessRegOut { data })
}

fn pcap(st: &State, c: &AccessReg) -> Exec {
    let Some(p) = Pcap::decode(&c.data) else {
        return Exec::Fail(CmdStatus::BAD_INP_LEN_ERR, synd::INPUT_SHORT);
    };
    if p.port == 0 || p.port > st.cfg.ports {
        return Exec::Fail(CmdStatus::BAD_PARAM_ERR, synd::PORT);
    }
    match c.access {
        RegAccess::Write => Exec::PortCaps {
            port: p.port,
            caps: p.caps,
        },
        RegAccess::Read => super::done(ok(&AccessRegOut {
            data: Pcap {
                port: p.port,
                caps: st.ports[usize::from(p.port - 1)].snapshot.capability_mask,
            }
            .encode()
            .to_vec(),
        })),
    }
}

pub(super) fn query_special_contexts(_: &mut State, input: &[u8], _: u32) -> Out {
    let _: QuerySpecialContexts = decode(input)?;
    ok(&SpecialContexts {
        dump_fill_mkey: special_keys::DUMP_FILL_MKEY,
        resd_lkey: special_keys::RESD_LKEY,
        null_mkey: special_keys::NULL_MKEY,
        terminate_scatter_list_mkey: special_keys::TERMINATE_SCATTER_LIST_MKEY,
        repeated_mkey: special_keys::REPEATED_MKEY,
    })
}
