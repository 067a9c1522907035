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

/// The system calls of one trace, in the order they returned, except `close`, in the
/// order it began. `first_line` numbers the trace's lines after those of earlier traces
/// of the same history.
///
/// A `close` frees its descriptor as it begins, before it flushes and returns: another
/// thread's `openat` can be given the same number and return first. Taken in return
/// order, that close would close the new file in the model, and the writes to it would
/// be lost (seen on a loaded machine: a staged file modelled empty).
pub fn parse(trace: &str, first_line: usize) -> Vec<Syscall> {
    let mut pending: HashMap<&str, (String, usize)> = HashMap::new();
    let mut calls = Vec::new();
    for (i, line) in trace.lines().enumerate() {
        let line_no = first_line + i;
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
            let joined = if head.ends_with('(') || tail.starts_with(')') {
                format!("{head}{}", tail.trim_start())
            } else {
                format!("{head} {}", tail.trim_start())
            };
            (joined, start)
        } else {
            (rest.to_string(), line_no)
        };
        if let Some(call) = call(&text, start, line_no) {
            calls.push(call);
        }
    }
    calls.sort_by_key(|c| if c.name == "close" { c.start } else { c.end });
    calls
}

/// `name(args) = ret`, or `None` for signals, exits and failed calls.
fn call(text: &str, start: usize, end: usize) -> Option<Syscall> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let (args, close) = split_args(&text[open + 1..])?;
    let after = &text[open + 1 + close + 1..];
    let ret = after.trim_start().strip_prefix('=')?.trim_start();
    let ret: i64 = ret.split_whitespace().next()?.parse().ok()?;
    if ret < 0 {
        return None;
    }
    Some(Syscall {
        name: name.to_string(),
        args,
        ret,
        start,
        end,
    })
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
        let calls = parse(trace, 100);
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
        let names: Vec<_> = parse(reused, 0).into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["close", "openat", "write"]);
        let writev = "[{iov_base=\"\\x61\", iov_len=1}, {iov_base=\"\\x62\\x63\", iov_len=2}]";
        assert_eq!(all_bytes(writev), b"abc");
    }
}
