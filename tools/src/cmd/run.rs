//! `hca run [--device DEV] -- PROGRAM ARGS...`: run an unmodified libibumad program (OpenSM,
//! the infiniband-diags tools) on this project's `libibumad.so.3` instead of rdma-core's.
//!
//! It finds the built library, makes a directory where it is called `libibumad.so.3`, puts
//! that directory first in `LD_LIBRARY_PATH` (or preloads the library with `--preload`),
//! sets `HCA_DEVICE`, and executes the program in its place.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::CmdResult;
use crate::error::ToolError;

/// Long help of `hca run`.
pub const HELP: &str = "\
The program runs unmodified: the dynamic linker finds this project's libibumad.so.3 before
rdma-core's, and the library opens the device named by --device (HCA_DEVICE): the
simulator by default, a fabric from a topology file with sim:topology=FILE,node=NAME, or a
function bound to vfio-pci with vfio:DDDD:BB:DD.F.

With state=FILE in a sim: device, the simulated fabric's state (port states, LIDs, forwarding
tables) is loaded from FILE at start and saved there at exit, so that what OpenSM
configured is still there for the next program.

The library is looked for in --lib, then HCA_UMAD_LIB, then next to this program
(target/<profile>/ and its deps/ after `cargo build`).

Examples:
  hca run -- ibstat
  hca run -- smpquery nodeinfo 1
  hca run --device sim:topology=net,node=Hca1 -- ibnetdiscover
  hca run --device sim:topology=net,node=Hca1,state=net.state -- opensm -o
  hca run --device sim:topology=net,node=Hca2,state=net.state -- ibroute 2
  hca run --preload -- perfquery";

/// Arguments of `hca run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device string (sets HCA_DEVICE; without it HCA_DEVICE is left as it is, and
    /// the library's default is the simulator).
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// The libibumad.so to use.
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// Load the library with LD_PRELOAD instead of putting it first in LD_LIBRARY_PATH.
    #[arg(long)]
    pub preload: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Where the library is: `explicit`, else `HCA_UMAD_LIB`, else the newest `libibumad.so`
/// beside `exe` or in its `deps/`.
pub fn find_lib(explicit: Option<&Path>, exe: &Path) -> Result<PathBuf, ToolError> {
    if let Some(p) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HCA_UMAD_LIB").map(PathBuf::from))
    {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ToolError::NoUmadLib {
                looked: vec![p.display().to_string()],
            })
        };
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join("libibumad.so"), dir.join("deps/libibumad.so")];
    let newest = candidates
        .iter()
        .filter_map(|c| Some((std::fs::metadata(c).ok()?.modified().ok()?, c.clone())))
        .max_by_key(|(t, _)| *t)
        .map(|(_, c)| c);
    newest.ok_or_else(|| ToolError::NoUmadLib {
        looked: candidates.iter().map(|c| c.display().to_string()).collect(),
    })
}

/// A directory holding `libibumad.so.3` pointing at `lib`: `hca-umad/` beside the library
/// when it can be written, else `hca-umad-UID/` in the temporary directory: one per user,
/// reused by every run (`hca run` execs, so a directory per process would never be removed),
/// and private ([`private_dir`]), since the library it names is loaded by what runs.
pub fn link_dir(lib: &Path) -> Result<PathBuf, ToolError> {
    let lib = std::fs::canonicalize(lib).map_err(|e| ToolError::Io {
        what: format!("resolving {}", lib.display()),
        source: e,
    })?;
    let beside = lib.parent().map(|d| d.join("hca-umad"));
    if let Some(dir) = beside
        && make_link(&dir, &lib).is_ok()
    {
        return Ok(dir);
    }
    // SAFETY: getuid cannot fail and touches no memory of ours.
    let uid = unsafe { libc::getuid() };
    let fallback = std::env::temp_dir().join(format!("hca-umad-{uid}"));
    if private_dir(&fallback, uid)
        .and_then(|()| make_link(&fallback, &lib))
        .is_ok()
    {
        return Ok(fallback);
    }
    Err(ToolError::Io {
        what: "making a directory for libibumad.so.3".into(),
        source: std::io::Error::other("neither beside the library nor in the temporary directory"),
    })
}

/// Make `dir` a directory of `uid`'s that no one else can write (mode 0700), or check that
/// it is one: in a shared temporary directory another user could have made it first, or put a
/// link there, and would then choose the library our programs load.
pub fn private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(dir)?;
    if !m.file_type().is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory of user {uid}'s that only it can write",
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn make_link(dir: &Path, lib: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join("libibumad.so.3");
    if std::fs::read_link(&link).is_ok_and(|t| t == lib) {
        return Ok(());
    }
    // Replace atomically: programs started a moment ago may be loading the old link.
    let tmp = dir.join(format!(".libibumad.so.3.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(lib, &tmp)?;
    std::fs::rename(&tmp, &link)
}

/// The command `hca run` executes.
pub fn command(args: &Args, lib: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if args.preload {
        let mut v = OsString::from(lib.as_os_str());
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            v.push(":");
            v.push(old);
        }
        cmd.env("LD_PRELOAD", v);
    } else {
        let mut v = OsString::from(dir.as_os_str());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
            v.push(":");
            v.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", v);
    }
    if let Some(d) = &args.device {
        cmd.env(ibumad::DEVICE_ENV, d);
    }
    cmd
}

/// Run the program in place of this process.
pub fn run(args: &Args) -> CmdResult {
    let exe = std::env::current_exe()?;
    let lib = find_lib(args.lib.as_deref(), &exe)?;
    let dir = link_dir(&lib)?;
    let err = command(args, &lib, &dir).exec();
    Err(Box::new(ToolError::Exec {
        program: args.command[0].to_string_lossy().into_owned(),
        source: err,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    #[test]
    fn the_per_user_directory_is_made_private_and_others_are_refused() {
        let t = tempfile::tempdir().unwrap();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let dir = t.path().join("hca-umad-x");
        private_dir(&dir, uid).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        private_dir(&dir, uid).unwrap();
        // Someone else's (another uid), one others can write, a link: refused.
        assert!(private_dir(&dir, uid + 1).is_err());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_dir(&dir, uid).is_err());
        let link = t.path().join("link");
        std::fs::create_dir(t.path().join("target")).unwrap();
        std::os::unix::fs::symlink(t.path().join("target"), &link).unwrap();
        assert!(private_dir(&link, uid).is_err());
    }
}
