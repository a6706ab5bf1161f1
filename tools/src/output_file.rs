//! Output files that are replaced only when the output is complete: a command that fails
//! halfway (a walk that cannot open its device, a spec the generator refuses) leaves the file
//! it was told to write as it was, even when that file is the topology it reads.
//!
//! The output is written to a new file beside the destination, under a name no one can
//! foresee, created with `O_CREAT|O_EXCL` (which follows no symbolic link and opens no file
//! that exists), and renamed over the destination at the end. `hca discover` may run as root
//! in a directory others can write (`/tmp`): a fixed name such as `FILE.tmp`, opened with
//! truncation, would let anyone who plants a link there have root overwrite its target, and
//! would clobber a file of the user's own that has that name.

use std::collections::hash_map::RandomState;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Names tried before giving up: each is taken only if no file of that name exists, so more
/// than one try is needed only when someone creates files under names they cannot foresee.
const TRIES: usize = 16;

/// A file written beside `FILE` as `FILE.XXXXXXXXXXXXXXXX.tmp` (16 random hex digits) and
/// renamed over `FILE` by [`ReplaceFile::commit`]; dropped without a commit, the temporary
/// file is removed.
#[derive(Debug)]
pub struct ReplaceFile {
    dest: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

/// 64 bits no other user can foresee: the standard library seeds each [`RandomState`] from
/// the operating system's random source (its keys then advance per thread, hence the hash of
/// the process ID and a clock reading on top).
fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

impl ReplaceFile {
    /// Create the temporary file in `dest`'s directory (so that the rename stays on one file
    /// system). Creating it first makes a bad path fail before any work is done; a `dest`
    /// that is a directory is refused then too (the rename over it would fail at the end).
    /// The error names the path it is about.
    pub fn create(dest: &Path) -> io::Result<Self> {
        Self::create_named(dest, &mut random_suffix)
    }

    /// [`ReplaceFile::create`] with the random part of the name from `suffix`.
    fn create_named(dest: &Path, suffix: &mut dyn FnMut() -> String) -> io::Result<Self> {
        let name = dest
            .file_name()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a file name", dest.display()),
                )
            })?
            .to_os_string();
        if dest.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!(
                    "{} is a directory: give the name of the file to write",
                    dest.display()
                ),
            ));
        }
        let mut last = None;
        for _ in 0..TRIES {
            let mut tmp_name = name.clone();
            tmp_name.push(format!(".{}.tmp", suffix()));
            let tmp = dest.with_file_name(tmp_name);
            // create_new: O_CREAT|O_EXCL, so an existing file or link of that name is left
            // alone (and a link is not followed).
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => {
                    return Ok(ReplaceFile {
                        dest: dest.to_path_buf(),
                        tmp,
                        out: Some(BufWriter::new(file)),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(tmp),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e}", tmp.display()),
                    ));
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "cannot create a temporary file beside {}: {TRIES} names were taken (the last \
                 {})",
                dest.display(),
                last.map_or_else(String::new, |p| p.display().to_string())
            ),
        ))
    }

    /// The temporary file's path.
    #[cfg(test)]
    fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Flush the output and rename it over the destination; on failure the temporary file is
    /// removed and the destination left as it was.
    pub fn commit(mut self) -> io::Result<()> {
        // Only `commit` (which takes `self`) and `Drop` take `out`.
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let done = out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
            .and_then(|file| file.sync_all())
            .and_then(|()| fs::rename(&self.tmp, &self.dest));
        if done.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        done
    }
}

impl Write for ReplaceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.as_mut().map_or(Ok(0), |o| o.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for ReplaceFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_destination_changes_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("net.topo");
        fs::write(&dest, "old\n").unwrap();
        let mut f = ReplaceFile::create(&dest).unwrap();
        f.write_all(b"new\n").unwrap();
        let tmp = f.tmp_path().to_path_buf();
        assert_eq!(tmp.parent(), Some(dir.path()));
        let tmp_name = tmp.file_name().unwrap().to_str().unwrap();
        let random = tmp_name
            .strip_prefix("net.topo.")
            .and_then(|r| r.strip_suffix(".tmp"))
            .unwrap_or_else(|| panic!("{tmp_name}"));
        assert!(
            random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()),
            "{tmp_name}"
        );
        assert_eq!(fs::read_to_string(&dest).unwrap(), "old\n");
        drop(f);
        assert_eq!(fs::read_to_string(&dest).unwrap(), "old\n");
        assert_eq!(names(dir.path()), ["net.topo"]);
        let mut f = ReplaceFile::create(&dest).unwrap();
        assert_ne!(f.tmp_path(), tmp, "a new name each time");
        f.write_all(b"new\n").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&dest).unwrap(), "new\n");
        assert_eq!(names(dir.path()), ["net.topo"]);
    }

    /// What others put where the temporary file could go (a link to a file of theirs, a file
    /// of the user's own named FILE.tmp, a file at the name about to be tried) is neither
    /// written nor followed nor removed, whether the output is committed or dropped.
    #[test]
    fn files_and_links_at_temporary_names_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.topo");
        let victim = dir.path().join("victim");
        fs::write(&victim, "victim\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("out.topo.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("out.topo.aaaa.tmp")).unwrap();
        fs::write(dir.path().join("out.topo.bbbb.tmp"), "mine\n").unwrap();
        let planted = names(dir.path());
        for commit in [false, true] {
            let mut tries = ["aaaa", "bbbb", "cccc"].into_iter().map(String::from);
            let mut f = ReplaceFile::create_named(&dest, &mut || tries.next().unwrap()).unwrap();
            assert_eq!(f.tmp_path(), dir.path().join("out.topo.cccc.tmp"));
            f.write_all(b"new\n").unwrap();
            if commit {
                f.commit().unwrap();
                assert_eq!(fs::read_to_string(&dest).unwrap(), "new\n");
                fs::remove_file(&dest).unwrap();
            } else {
                drop(f);
            }
            assert_eq!(fs::read_to_string(&victim).unwrap(), "victim\n");
            assert_eq!(
                fs::read_to_string(dir.path().join("out.topo.bbbb.tmp")).unwrap(),
                "mine\n"
            );
            assert_eq!(names(dir.path()), planted, "commit: {commit}");
        }
        // The real names are random: a link planted at the old fixed name is not used.
        let mut f = ReplaceFile::create(&dest).unwrap();
        f.write_all(b"new\n").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "victim\n");
        // When every name tried is taken, creation fails and says so.
        let e = ReplaceFile::create_named(&dest, &mut || "aaaa".into()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("names were taken"), "{e}");
    }

    #[test]
    fn a_directory_is_refused_before_anything_is_written() {
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join("out");
        fs::create_dir(&dest).unwrap();
        for d in [dest.clone(), parent.path().join("out/")] {
            let e = ReplaceFile::create(&d).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::IsADirectory, "{}", d.display());
            assert!(e.to_string().contains("is a directory"), "{e}");
            assert_eq!(names(parent.path()), ["out"], "{}", d.display());
        }
        assert!(dest.is_dir());
    }
}
