//! Which process holds a lease, precisely enough that another process on the same host
//! can tell it no longer runs.
//!
//! A lease held by a process that was killed (`kill -9`, the OOM killer) stays live until
//! its time runs out; a `--recover` on the same host would wait those seconds for
//! nothing. A process is one that runs here now when all of these match: the host name,
//! the boot (`/proc/sys/kernel/random/boot_id`), the pid namespace (a container's pids
//! are its own), the pid, and the pid's start time since boot (a pid is reused after its
//! process exits; its start time is not). Anything unknown means "cannot tell", and a
//! lease that cannot be judged is waited for as before: taking a live one would let two
//! writers in (the journal would still fence the second, but the lease exists so that it
//! need not).

use serde::{Deserialize, Serialize};

/// A process, as `/proc` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Process {
    pub(crate) host: String,
    pub(crate) boot_id: String,
    pub(crate) pid_namespace: String,
    pub(crate) pid: u32,
    /// Clock ticks from boot to the process's start (`/proc/PID/stat`, field 22).
    pub(crate) start_ticks: u64,
}

impl Process {
    /// This process, if `/proc` tells all of it.
    pub(crate) fn me() -> Option<Process> {
        let pid = std::process::id();
        Some(Process {
            host: host()?,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id")?,
            pid_namespace: std::fs::read_link("/proc/self/ns/pid")
                .ok()?
                .to_string_lossy()
                .into_owned(),
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// True only when this process is on the same host, boot and pid namespace as
    /// `self`, and `self`'s pid is gone or now names a process started at another time.
    pub(crate) fn is_gone(&self) -> bool {
        let Some(me) = Process::me() else {
            return false;
        };
        if (&me.host, &me.boot_id, &me.pid_namespace)
            != (&self.host, &self.boot_id, &self.pid_namespace)
        {
            return false;
        }
        match std::fs::metadata(format!("/proc/{}", self.pid)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(_) => false,
            Ok(_) => start_ticks(self.pid).is_some_and(|now| now != self.start_ticks),
        }
    }
}

/// The host's name, as the lease names its holder.
pub(crate) fn host() -> Option<String> {
    read_trimmed("/proc/sys/kernel/hostname")
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Field 22 of `/proc/PID/stat`. The second field, the command name in parentheses, may
/// hold spaces and parentheses itself, so fields are counted from its last `)`.
fn start_ticks(pid: u32) -> Option<u64> {
    start_ticks_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time in a `/proc/PID/stat` line.
fn start_ticks_of(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name come field 3 (state) onwards: field 22 is the 20th of them.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs() {
        let me = Process::me().expect("/proc names this process");
        assert_eq!(me.pid, std::process::id());
        assert!(!me.is_gone());
    }

    #[test]
    fn an_exited_process_is_gone() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let pid = child.id();
        let mut was = Process::me().expect("/proc names this process");
        was.pid = pid;
        was.start_ticks = start_ticks(pid).unwrap_or(0);
        child.wait().expect("true exits");
        assert!(was.is_gone(), "pid {pid} has exited and been reaped");
    }

    #[test]
    fn a_reused_pid_is_gone_a_process_elsewhere_is_not_judged() {
        let me = Process::me().expect("/proc names this process");
        let reused = Process {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(reused.is_gone());
        for elsewhere in [
            Process {
                host: format!("{}-other", me.host),
                pid: u32::MAX,
                ..me.clone()
            },
            Process {
                boot_id: "another boot".into(),
                pid: u32::MAX,
                ..me.clone()
            },
            Process {
                pid_namespace: "pid:[1]".into(),
                pid: u32::MAX,
                ..me.clone()
            },
        ] {
            assert!(!elsewhere.is_gone(), "{elsewhere:?}");
        }
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let fields: Vec<String> = (3..=52).map(|f| f.to_string()).collect();
        let rest = fields.join(" ");
        assert_eq!(start_ticks_of(&format!("7 (ingest) {rest}")), Some(22));
        assert_eq!(start_ticks_of(&format!("7 (a) b (c)) {rest}")), Some(22));
        assert_eq!(start_ticks_of("7 (cut short) S 1"), None);
        assert!(start_ticks(std::process::id()).is_some_and(|t| t > 0));
    }
}
