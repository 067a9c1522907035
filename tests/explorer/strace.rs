//! Reads `strace -f -xx` output into system calls: name, arguments, result, and the
//! trace lines where each began and ended (a call that another thread interrupted is
//! printed as `<unfinished ...>` and later `<... name resumed>`).

use std::collections::HashMap;

/// One completed system call.
#[derive(Debug, Clone)]
pub struct Syscall {
    pub name: String,
    /// Top-level arguments as strace printed them.
    pub args: Vec<String>,
    /// The return value; failed calls (negative) are dropped by [`parse`].
    pub ret: i64,
    /// Line (in the whole history) where the call began.
    pub start: usize,
    /// Line where it returned.
    pub end: usize,
}

/// The system calls of one trace.
pub struct Trace {
    /// The calls that returned, in the order they returned, except `close`, in the
    /// order it began.
    pub calls: Vec<Syscall>,
    /// Calls a kill cut short: strace printed no result for them (`= ?`, or a call
    /// begun and never resumed), so the kernel may or may not have carried them out
    /// (a `mkdir` on one thread while another thread aborts the process is made, and
    /// strace never sees it return). Each has the last line of the trace as its end,
    /// and a write, the length of its buffers as its result.
    pub in_flight: Vec<Syscall>,
}

/// The system calls of one trace. `first_line` numbers the trace's lines after those
/// of earlier traces of the same history.
///
/// A `close` frees its descriptor as it begins, before it flushes and returns: another
/// thread's `openat` can be given the same number and return first. Taken in return
/// order, that close would close the new file in the model, and the writes to it would
/// be lost (seen on a loaded machine: a staged file modelled empty).
pub fn parse(trace: &str, first_line: usize) -> Trace {
    let mut pending: HashMap<&str, (String, usize)> = HashMap::new();
    let (mut calls, mut in_flight) = (Vec::new(), Vec::new());
    let mut last_line = first_line;
    for (i, line) in trace.lines().enumerate() {
        let line_no = first_line + i;
        last_line = line_no;
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let (text, start) = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid, (head.trim_end().to_string(), line_no));
            continue;
        } else if rest.starts_with("<...") {
            let Some((head, start)) = pending.remove(pid) else {
                continue;
            };
            let tail = rest.split_once("resumed>").map_or("", |(_, t)| t);
            (join(&head, tail), start)
        } else {
            (rest.to_string(), line_no)
        };
        match call(&text, start, line_no) {
            Some(Returned::Value(call)) => calls.push(call),
            Some(Returned::Unknown(call)) => in_flight.push(call),
            None => {}
        }
    }
    let mut never_resumed: Vec<(String, usize)> = pending.into_values().collect();
    never_resumed.sort_by_key(|(_, start)| *start);
    for (head, start) in never_resumed {
        if let Some(Returned::Unknown(call)) = call(&join(&head, ") = ?"), start, last_line) {
            in_flight.push(call);
        }
    }
    for call in &mut in_flight {
        call.end = last_line;
        if call.name.starts_with("write") || call.name.starts_with("pwrite") {
            let data = if call.name.ends_with('v') || call.name.ends_with("v2") {
                all_bytes(call.args.get(1).map_or("", String::as_str))
            } else {
                call.args.get(1).and_then(|a| bytes(a)).unwrap_or_default()
            };
            call.ret = data.len() as i64;
        }
    }
    calls.sort_by_key(|c| if c.name == "close" { c.start } else { c.end });
    Trace { calls, in_flight }
}

/// An interrupted call's beginning and the rest of it printed when it resumed.
fn join(head: &str, tail: &str) -> String {
    let tail = tail.trim_start();
    if head.ends_with('(') || tail.starts_with(')') {
        format!("{head}{tail}")
    } else {
        format!("{head} {tail}")
    }
}

/// How a call ended, as strace printed it.
enum Returned {
    Value(Syscall),
    /// `= ?`: the process died before the call returned (its `ret` is 0).
    Unknown(Syscall),
}

/// `name(args) = ret`, or `None` for signals, exits and failed calls.
fn call(text: &str, start: usize, end: usize) -> Option<Returned> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let (args, close) = split_args(&text[open + 1..])?;
    let after = &text[open + 1 + close + 1..];
    let ret = after.trim_start().strip_prefix('=')?.trim_start();
    let ret = ret.split_whitespace().next()?;
    let mut call = Syscall {
        name: name.to_string(),
        args,
        ret: 0,
        start,
        end,
    };
    if ret == "?" {
        return Some(Returned::Unknown(call));
    }
    call.ret = ret.parse().ok()?;
    (call.ret >= 0).then_some(Returned::Value(call))
}

/// Splits the text after `(` into top-level arguments; returns them and the index of
/// the closing `)`. With `-xx` every string is hex escapes, so no quote or comma hides
/// inside one.
fn split_args(text: &str) -> Option<(Vec<String>, usize)> {
    let mut args = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut current = String::new();
    for (i, c) in text.char_indices() {
        if in_string {
            current.push(c);
            if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                current.push(c);
            }
            '(' | '[' | '{' => {
                depth += 1;
                current.push(c);
            }
            ')' if depth == 0 => {
                if !current.trim().is_empty() {
                    args.push(current.trim().to_string());
                }
                return Some((args, i));
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => {
                args.push(current.trim().to_string());
                current.clear();
            }
            c => current.push(c),
        }
    }
    None
}

/// The bytes of a `-xx` string argument (`"\x61\x62"`), or `None` if it is not one or
/// strace cut it short (`"..."...`).
pub fn bytes(arg: &str) -> Option<Vec<u8>> {
    let inner = arg.strip_prefix('"')?;
    let end = inner.find('"')?;
    if inner[end + 1..].starts_with("...") {
        panic!("strace cut a string short: raise -s");
    }
    let hex = &inner[..end];
    let mut out = Vec::with_capacity(hex.len() / 4);
    let mut rest = hex;
    while !rest.is_empty() {
        let h = rest.strip_prefix("\\x")?;
        out.push(u8::from_str_radix(h.get(..2)?, 16).ok()?);
        rest = &h[2..];
    }
    Some(out)
}

/// Every `-xx` string inside an argument, in order (the buffers of `writev`).
pub fn all_bytes(arg: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(at) = rest.find('"') {
        let Some(len) = rest[at + 1..].find('"') else {
            break;
        };
        let quoted = &rest[at..at + len + 2];
        out.extend(bytes(quoted).unwrap_or_default());
        rest = &rest[at + len + 2..];
    }
    out
}

/// A string argument as a path.
pub fn path(arg: &str) -> Option<String> {
    String::from_utf8(bytes(arg)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_calls_are_joined_and_failed_ones_dropped() {
        let trace = "\
10 openat(AT_FDCWD, \"\\x61\", O_RDONLY <unfinished ...>
11 fsync(3 <unfinished ...>
10 <... openat resumed>) = 4
11 <... fsync resumed>) = 0
10 mkdir(\"\\x62\", 0777) = -1 EEXIST (File exists)
10 --- SIGABRT {si_signo=SIGABRT} ---
10 write(4, \"\\x68\\x69\", 2) = 2
";
        let calls = parse(trace, 100).calls;
        let names: Vec<_> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["openat", "fsync", "write"]);
        assert_eq!((calls[0].start, calls[0].end), (100, 102));
        assert_eq!(calls[0].args, ["AT_FDCWD", "\"\\x61\"", "O_RDONLY"]);
        assert_eq!(calls[0].ret, 4);
        assert_eq!(bytes(&calls[2].args[1]), Some(b"hi".to_vec()));
        // A close still returning when another thread is given its descriptor.
        let reused = "\
20 close(7 <unfinished ...>
21 openat(AT_FDCWD, \"\\x79\", O_WRONLY|O_CREAT, 0666) = 7
20 <... close resumed>) = 0
21 write(7, \"\\x7a\", 1) = 1
";
        let names: Vec<_> = parse(reused, 0).calls.into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["close", "openat", "write"]);
        let writev = "[{iov_base=\"\\x61\", iov_len=1}, {iov_base=\"\\x62\\x63\", iov_len=2}]";
        assert_eq!(all_bytes(writev), b"abc");
    }

    #[test]
    fn calls_a_kill_cut_short_are_in_flight_not_dropped() {
        // Thread 31 aborts while 30 is in a mkdir and 32 in a write: strace prints the
        // mkdir's end with no result and never prints the write's.
        let trace = "\
30 mkdir(\"\\x64\", 0777 <unfinished ...>
32 write(5, \"\\x61\\x62\\x63\", 3 <unfinished ...>
31 rename(\"\\x61\", \"\\x62\") = 0
31 --- SIGABRT {si_signo=SIGABRT} ---
30 <... mkdir resumed>) = ?
31 +++ killed by SIGABRT +++
30 unlink(\"\\x65\") = ?
";
        let trace = parse(trace, 10);
        let names: Vec<_> = trace.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["rename"]);
        let in_flight: Vec<_> = trace
            .in_flight
            .iter()
            .map(|c| (c.name.as_str(), c.start, c.end, c.ret))
            .collect();
        assert_eq!(
            in_flight,
            [
                ("mkdir", 10, 16, 0),
                ("unlink", 16, 16, 0),
                ("write", 11, 16, 3)
            ]
        );
        assert_eq!(path(&trace.in_flight[0].args[0]).as_deref(), Some("d"));
    }
}
