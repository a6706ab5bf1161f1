//! mlx5 (Connect-IB, ConnectX-4 and later): everything the driver and the device model share
//! as data. Command layouts follow mlx5_ifc.h (bit offsets from the MSB of big-endian dword 0);
//! byte-aligned structures (init segment, command entry, mailbox, CQE, EQE, WQE segments)
//! follow the kernel's C structs.

pub mod bits;
pub mod caps;
pub mod cmd;
pub mod cqc;
pub mod cqe;
pub mod decode;
pub mod doorbell;
pub mod eqc;
pub mod eqe;
pub mod grh;
pub mod health;
pub mod init_seg;
pub mod opcode;
pub mod ops;
pub mod qpc;
pub mod syndrome;
pub mod timeouts;
pub mod wqe;

pub use opcode::Opcode;
