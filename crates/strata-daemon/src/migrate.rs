//! How the pages of another process move between nodes: the one mechanism module, which the
//! live daemon's machine and `strata bench migrate` both use.
//!
//! - `move_pages`: move_pages(2); the kernel copies while the process's accesses to the page
//!   wait.
//! - `transactional`: through the process's agent (libstrata/agent/), which copies while the
//!   page stays in use and commits only if it was not written meanwhile; promotions keep a
//!   shadow, clean demotions remap it ([`crate::agent`], docs/migration.md). An agent that
//!   stops answering is dropped, and its process's pages go by move_pages from then on.
//!
//! Shadows are copies of promoted pages kept on the slower node; when it runs short, the
//! daemon has every agent drop them ([`drop_shadows`]): nothing is lost, and no move fails.
use strata_policy::Node;
use stratad::config::Mechanism;
use stratad::machine::{move_statuses, MoveStatus, Refusal};

use crate::agent::Agent;
use crate::scratch::{Page, Uffd, UFFD_FEATURE_MOVE, UFFD_FEATURE_WP_ASYNC};

const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// move_pages(2) on process `pid`: each page to its node of `nodes`, or with None only where
/// each page is; a status a page (its node, or a negative errno), or the call's errno.
pub fn move_pages(pid: u32, pages: &[u64], nodes: Option<&[libc::c_int]>) -> Result<Vec<libc::c_int>, i32> {
    let ptrs: Vec<*mut libc::c_void> = pages.iter().map(|&a| a as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    let nodes_ptr = nodes.map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: the arrays have pages.len() elements and outlive the call
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_long,
            ptrs.len() as libc::c_ulong,
            ptrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            MPOL_MF_MOVE,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    Ok(status)
}

/// Where each page of process `pid` is (None: not resident, or the process is gone).
pub fn locate(pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
    match move_pages(pid, pages, None) {
        Ok(st) => st.iter().map(|&s| (s >= 0).then_some(s as Node)).collect(),
        Err(_) => vec![None; pages.len()],
    }
}

/// Move `pages` of process `pid` to node `to` by `mechanism` (transactional: through `agent`,
/// `attempts` copies a page at most, when there is one; an agent that fails is dropped and
/// the pages go by move_pages). One status a page.
pub fn move_to(
    pid: u32,
    agent: &mut Option<Agent>,
    mechanism: Mechanism,
    attempts: u32,
    pages: &[u64],
    to: Node,
) -> Vec<MoveStatus> {
    if let (Some(a), Mechanism::Transactional) = (agent.as_mut(), mechanism) {
        match a.move_pages(pages, to, attempts, false) {
            Ok(st) => return move_statuses(&st, to),
            Err(e) => {
                if !crate::agent::closed(&e) {
                    eprintln!("strata daemon: process {pid}'s agent stopped answering ({e}); moving by move_pages");
                }
                *agent = None;
            }
        }
    }
    let nodes = vec![to as libc::c_int; pages.len()];
    match move_pages(pid, pages, Some(&nodes)) {
        Ok(status) => move_statuses(&status, to),
        Err(e) => vec![Err(Refusal::from_errno(e)); pages.len()],
    }
}

/// Have `agent` drop every shadow it keeps; false when it stopped answering (drop it).
pub fn drop_shadows(agent: &mut Agent) -> bool {
    agent.counters.shadows == 0 || agent.drop_shadows(0).is_ok()
}

/// Whether move_pages(2) works here: it finds a page of the daemon's own.
pub fn probe_move_pages() -> Result<String, String> {
    let page = Page::new()?;
    match move_pages(0, &[page.addr()], None).as_deref() {
        Ok([node]) if *node >= 0 => Ok(format!("move_pages(2) found this process's page on node {node}")),
        Ok([e]) => Err(format!("move_pages(2) on a page of this process: {}", std::io::Error::from_raw_os_error(-e))),
        Ok(_) => Err("move_pages(2) answered for another number of pages".into()),
        Err(e) => Err(format!("move_pages(2) on a page of this process: {}", std::io::Error::from_raw_os_error(*e))),
    }
}

/// Whether the transactional mover can work here: a full userfaultfd (what a process's agent
/// needs) with UFFDIO_MOVE moves a page of the daemon's own whole.
pub fn probe_transactional() -> Result<String, String> {
    let uffd = Uffd::open(false).map_err(|e| {
        format!(
            "a full {e} (a process's agent needs root, access to /dev/userfaultfd, or \
             vm.unprivileged_userfaultfd = 1)"
        )
    })?;
    uffd.api(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_MOVE).map_err(|e| {
        format!(
            "userfaultfd offers no UFFDIO_MOVE with asynchronous write-protect (Linux 6.8): {e}; the daemon moves \
             by move_pages"
        )
    })?;
    // a page moved for real: from one of ours into a registered, empty one
    let from = Page::new()?;
    from.write(42);
    let to = Page::new()?;
    to.discard();
    uffd.register_wp(&to).map_err(|e| format!("UFFDIO_REGISTER: {e}"))?;
    uffd.move_page(&to, &from).map_err(|e| format!("UFFDIO_MOVE of a page: {e}"))?;
    match to.read() {
        42 => Ok("a full userfaultfd with UFFDIO_MOVE moved a page of this process whole".into()),
        v => Err(format!("UFFDIO_MOVE ran but the page reads {v}, not what was written")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn pages_move_by_move_pages_without_an_agent_and_an_agent_that_fails_is_dropped() {
        let v = vec![7u8; 3 * 4096];
        let page = (v.as_ptr() as u64).next_multiple_of(4096);
        let pid = std::process::id();
        let node = locate(pid, &[page])[0].expect("a touched page is resident");
        let mut none = None;
        assert_eq!(move_to(pid, &mut none, Mechanism::Transactional, 3, &[page], node), vec![Ok(())]);
        // an agent whose connection is closed: dropped, and the page moves by move_pages
        let (stream, other) = UnixStream::pair().unwrap();
        drop(other);
        let mut agent = Some(Agent::new(stream, std::time::Duration::from_secs(5)));
        assert_eq!(move_to(pid, &mut agent, Mechanism::Transactional, 3, &[page], node), vec![Ok(())]);
        assert!(agent.is_none(), "an agent that stopped answering is forgotten");
        assert_eq!(locate(pid, &[page + (1 << 40)]), vec![None], "an unmapped page");
        assert!(matches!(move_to(u32::MAX - 1, &mut None, Mechanism::MovePages, 3, &[page], node)[..], [Err(_)]));
        assert!(probe_move_pages().is_ok());
    }
}
