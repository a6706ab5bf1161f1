//! Reading a text file the simulator is given (a topology, a saved state) without trusting it
//! to end: only regular files are read, and only up to a size bound.
//!
//! A device such as `/dev/zero` or `/dev/urandom` never reaches end of file, and a FIFO may
//! never get a writer; reading either whole would grow memory without bound or hang. Opening
//! with `O_NONBLOCK` keeps even a FIFO without writer from blocking the open, and the type is
//! checked on the open descriptor (`fstat`), so a path swapped between a check and the open
//! cannot slip a device in. A regular file is still read through a bound, because a file in
//! `/proc` or `/sys` reports size 0 and may be larger than it says.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most a topology file (each file, and a file with all its includes together) may hold:
/// 64 MiB. A fabric using every one of the 49,151 unicast LIDs for a CA port takes about
/// 350 bytes of ibnetdiscover text per CA (its record and the switch line that names it), some
/// 17 MB, so this is several times the largest fabric the LID space allows; the 2,144-node
/// fat tree (`fat-tree:leaves=64,hosts=32,spines=32`) takes 0.6 MB.
pub const MAX_TOPOLOGY_BYTES: u64 = 64 << 20;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    /// Opening, inspecting or reading the file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The path is not a regular file: a directory, or a device, FIFO or socket, which may
    /// never end or never answer.
    #[error("{}", not_regular_message(kind))]
    NotRegular {
        /// What it is instead ("character device", "FIFO", ...).
        kind: &'static str,
    },
    /// The file holds more than the bound for its kind of file.
    #[error("it is larger than {limit} bytes, {why}: check that this is the right file")]
    TooLarge {
        /// The bound, in bytes.
        limit: u64,
        /// Where the bound comes from.
        why: String,
    },
    /// The file is not UTF-8 text.
    #[error("it is not UTF-8 text: give a text file in the format the simulator writes")]
    NotUtf8,
}

/// The message of [`InputFileError::NotRegular`]: what applies to a `kind`.
fn not_regular_message(kind: &str) -> String {
    if kind == DIRECTORY {
        "it is a directory: give the path of a file (a directory has no text to read)".into()
    } else {
        format!(
            "it is a {kind}, not a regular file, and reading it might never end: save the text \
             to a regular file and give that file's path"
        )
    }
}

/// The kind [`kind_of`] gives a directory.
const DIRECTORY: &str = "directory";

/// What a non-regular file is, for the message.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        DIRECTORY
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Reads `path` as UTF-8 text if it is a regular file of at most `limit` bytes; `why` says in
/// the error where `limit` comes from.
pub fn read_text(path: &Path, limit: u64, why: &str) -> Result<String, InputFileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(InputFileError::NotRegular {
            kind: kind_of(meta.file_type()),
        });
    }
    let too_large = || InputFileError::TooLarge {
        limit,
        why: why.to_owned(),
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the limit tells a file at the limit from one above it.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| InputFileError::NotUtf8)
}

/// [`read_text`] for a caller whose errors are `io::Error`: a refusal becomes `InvalidData`
/// carrying the [`InputFileError`].
pub(crate) fn read_text_io(path: &Path, limit: u64, why: &str) -> std::io::Result<String> {
    read_text(path, limit, why).map_err(|e| match e {
        InputFileError::Io(io) => io,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other),
    })
}
