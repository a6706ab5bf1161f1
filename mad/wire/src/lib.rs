//! MAD wire formats, smoltcp style: a typed view over a byte buffer with a getter and setter per
//! field, and a plain `Repr` to parse into and emit from. Pure data, shared by the MAD layer and
//! the simulated fabric's SMA, and guarded by golden MADs recorded from ibsim and libibmad.
