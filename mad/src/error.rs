//! The one error type of the `mad` crate.

use driver::DriverError;
use driver::verbs::{PostError, SpecialQp};

use crate::event::SendId;

/// What the MAD layer refuses, and why. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum MadError {
    /// The device is in a fatal state or was removed: nothing more can be sent.
    #[error(
        "the device is in a fatal state ({reason}); every outstanding send was completed with \
         WR_FLUSH_ERR: close the HCA and open it again (reset or rebind the function)"
    )]
    DeviceFatal {
        /// What the driver reported.
        reason: String,
    },

    /// The agent is deregistered (or being deregistered).
    #[error("the agent is deregistered; register a new agent to send")]
    AgentClosed,

    /// The port has no QP0 (a function without an SMI, e.g. a VF).
    #[error(
        "port {port} has no QP0 (this function has no SMI): subnet-management agents need a \
         function that owns the port's SMI (the PF)"
    )]
    NoSmi {
        /// Port number.
        port: u8,
    },

    /// A registration the kernel's `ib_register_mad_agent` would refuse.
    #[error("invalid agent registration: {reason}")]
    InvalidRegistration {
        /// What is wrong.
        reason: String,
    },

    /// A registration names a method with the response bit (0x80) set: registrations name
    /// request methods (0x00–0x7F), and responses reach the agent that sent the request.
    #[error(
        "method {method:#04x} has the response bit (0x80) set: register the request method \
         {:#04x} to receive requests; responses come to the agent that sent the request",
        method & 0x7F
    )]
    ResponseMethod {
        /// The method given.
        method: u8,
    },

    /// A method of the registration is already registered by another agent.
    #[error(
        "method {method:#04x} of class {class:#04x} version {version}{} is already registered \
         by agent {holder} on this port; deregister it first or register other methods",
        oui.map(|o| format!(" OUI {o:06x}")).unwrap_or_default()
    )]
    RegistrationConflict {
        /// Management class.
        class: u8,
        /// Class version.
        version: u8,
        /// The method already taken.
        method: u8,
        /// OUI for a vendor range-2 class.
        oui: Option<u32>,
        /// The agent that holds it.
        holder: u32,
    },

    /// A vendor range-2 class already has the kernel's maximum of 8 OUIs registered.
    #[error(
        "class {class:#04x} version {version} already has 8 OUIs registered (the kernel's \
         MAX_MGMT_OUI); deregister one of them first"
    )]
    OuiSlotsFull {
        /// Management class.
        class: u8,
        /// Class version.
        version: u8,
    },

    /// The MAD to send is shorter than its 24-byte common header.
    #[error("a MAD of {len} bytes is shorter than the 24-byte MAD header")]
    MadTooShort {
        /// Bytes given.
        len: usize,
    },

    /// The MAD to send is longer than one MAD and is not an RMPP transfer.
    #[error(
        "a MAD of {len} bytes is longer than {max} bytes: a longer message goes by RMPP, which \
         needs an RMPP-capable class, an agent registered with RMPP version 1, and the RMPP \
         Active flag (byte 26, bit 0) set in the message"
    )]
    MadTooLarge {
        /// Bytes given.
        len: usize,
        /// The most accepted.
        max: usize,
    },

    /// The MAD's class does not travel on the agent's QP (SMPs only on QP0, the rest on QP1).
    #[error(
        "class {class:#04x} cannot be sent on {qp:?}: subnet-management classes (0x01, 0x81) \
         use QP0 and every other class QP1; register the agent on the right QP"
    )]
    ClassNotOnQp {
        /// The MAD's class.
        class: u8,
        /// The agent's QP.
        qp: SpecialQp,
    },

    /// An RMPP transfer shorter than the header of its class.
    #[error(
        "an RMPP message of {len} bytes is shorter than the {need}-byte header of its class; \
         the message is the class header (common MAD, RMPP and class headers) and then the data"
    )]
    RmppTooShort {
        /// Bytes given.
        len: usize,
        /// The class's header length.
        need: usize,
    },

    /// A directed-route SMP the SMI send rules discard (the kernel fails the post with
    /// EINVAL).
    #[error(
        "the directed-route SMP cannot be sent from port {port}: {reason}; a new request has \
         HopPointer 0, HopCount 0-63, InitialPath[1] = the sending port, and permissive \
         DrSLID/DrDLID for a pure directed route"
    )]
    DirectedRoute {
        /// The sending port.
        port: u8,
        /// Which rule discards it.
        reason: crate::smi::SmiDiscard,
    },

    /// The port's own SMA could not process an SMP sent to this port (MAD_IFC failed).
    #[error(
        "the SMA of port {port} could not process the SMP sent to it ({source}); the SMP was \
         not sent: check the attribute and M_Key, or the device's health"
    )]
    LocalSmp {
        /// The port.
        port: u8,
        /// What the driver said.
        #[source]
        source: DriverError,
    },

    /// A send of a class without RMPP from an agent registered with an RMPP version (the
    /// kernel's `ib_post_send_mad` refuses it with EINVAL, Active flag or not).
    #[error(
        "class {class:#04x} is not RMPP-capable and the agent is registered with an RMPP \
         version; send it from an agent registered with RMPP version 0"
    )]
    RmppClass {
        /// The MAD's class.
        class: u8,
    },

    /// Cancel or modify of a send that is not outstanding (finished, canceled, or not this
    /// agent's).
    #[error("send {0} is not outstanding (it finished, was canceled, or belongs to another agent)")]
    NotOutstanding(SendId),

    /// A DMA lease could not be had.
    #[error("DMA: {0}")]
    Dma(#[from] dma::DmaError),

    /// The driver refused something.
    #[error(transparent)]
    Driver(#[from] DriverError),

    /// The device refused a receive buffer while the port was being opened.
    #[error("posting receive buffers on {qp:?}: {source}")]
    PostRecv {
        /// Which QP.
        qp: SpecialQp,
        /// The driver's refusal.
        #[source]
        source: PostError,
    },

    /// A progress thread could not be started.
    #[error("starting the progress thread: {0}")]
    Thread(#[source] std::io::Error),

    /// [`crate::PortConfig::slots`] below the least a port works with.
    #[error(
        "PortConfig::slots is {slots}: a port needs at least {min} send slots per QP (one kept \
         for sends that await no response, such as replies, while requests hold the others)"
    )]
    TooFewSlots {
        /// The slots asked for.
        slots: u32,
        /// The least allowed ([`crate::MIN_SLOTS`]).
        min: u32,
    },
}
