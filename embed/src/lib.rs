//! The one crate that sees both the driver and the simulator: it adapts the simulator's device
//! models to the driver's `DeviceModel` interface and registers them, so that a program linking
//! this crate can open `sim:` device strings. Only programs (tools, umad, tests) depend on it.
