//! `hca`: list, bind and inspect Mellanox HCAs, on real hardware through VFIO or on the
//! built-in simulator.

fn main() {}
