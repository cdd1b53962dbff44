//! What `--inject` asks for: `TARGET=ACTION[@N]` specs parsed and checked, WASI errnos by
//! name or number, values by result type, and what a profile records of an injection.
//! [`crate::run::host_calls`] puts injections into imports in place; those into the
//! module's own functions go to the agent (see [`wprof_agent::Injections`]).

use serde::{Deserialize, Serialize};
use wasmtime::{Val, ValType};

/// The module WASI preview 1 functions are imported from.
const WASI: &str = "wasi_snapshot_preview1";
/// What to do instead of the call.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Trap (the program stops as on any trap).
    Trap,
    /// Return this WASI errno (the function's one `i32` result).
    Errno(u16),
    /// Return this value, as written (parsed as the function's one result type).
    Return(String),
}

/// One `--inject` spec, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// The spec as given.
    pub spec: String,
    /// The import's module (empty for a target that can only be one of the module's own
    /// functions).
    pub module: String,
    /// The import's name.
    pub name: String,
    /// The target as written (`wasi:` left out): the name of one of the module's own
    /// functions, when no import is named so.
    pub function: String,
    /// What to do.
    pub action: Action,
    /// Only the Nth call (counting from 1); `None`: every call.
    pub call: Option<u64>,
}

/// What the profile records of an injection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectionRecord {
    /// The spec as given.
    pub spec: String,
    /// The import, `module::name`.
    pub target: String,
    /// `trap`, `errno:NAME` or `return:VALUE`.
    pub action: String,
    /// Only this call (counting from 1), if one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<u64>,
    /// Calls the program made to the import.
    pub calls: u64,
    /// Calls that got the injected result instead.
    pub injected: u64,
}
impl Injection {
    /// Parses a spec; the error says what is wrong with it.
    pub fn parse(spec: &str) -> Result<Injection, String> {
        let (target, rest) = spec
            .split_once('=')
            .ok_or_else(|| "expected TARGET=ACTION, e.g. `wasi:fd_write=errno:EIO`".to_owned())?;
        let (module, name) = if let Some(name) = target.strip_prefix("wasi:") {
            (WASI, name)
        } else if let Some((module, name)) = target.split_once("::") {
            (module, name)
        } else {
            ("", target)
        };
        if name.is_empty() || (module.is_empty() && target.contains("::")) {
            return Err(format!("`{target}`: empty module or function name"));
        }
        let (action, call) = match rest.rsplit_once('@') {
            Some((action, n)) => {
                let n: u64 = n
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("`@{n}`: the call is a number from 1"))?;
                (action, Some(n))
            }
            None => (rest, None),
        };
        let action = if action == "trap" {
            Action::Trap
        } else if let Some(errno) = action.strip_prefix("errno:") {
            Action::Errno(errno_number(errno).ok_or_else(|| {
                format!("`{errno}`: not a WASI errno (a name such as EIO or NOENT, or 0-76)")
            })?)
        } else if let Some(value) = action.strip_prefix("return:") {
            if value.is_empty() {
                return Err("`return:` needs a value".to_owned());
            }
            Action::Return(value.to_owned())
        } else {
            return Err(format!(
                "`{action}`: the action is `trap`, `errno:NAME` or `return:VALUE`"
            ));
        };
        Ok(Injection {
            spec: spec.to_owned(),
            module: module.to_owned(),
            name: name.to_owned(),
            function: target.strip_prefix("wasi:").unwrap_or(target).to_owned(),
            action,
            call,
        })
    }

    /// `module::name`, or the function's name.
    pub fn target(&self) -> String {
        if self.module.is_empty() {
            self.function.clone()
        } else {
            format!("{}::{}", self.module, self.name)
        }
    }

    /// Whether it names an import of WASI's (`wasi:NAME`), which is never one of the
    /// module's own functions.
    pub fn is_wasi(&self) -> bool {
        self.module == WASI && self.function == self.name
    }

    pub fn action_text(&self) -> String {
        match &self.action {
            Action::Trap => "trap".to_owned(),
            Action::Errno(n) => format!("errno:{}", errno_name(*n)),
            Action::Return(v) => format!("return:{v}"),
        }
    }
}
/// Every WASI preview 1 errno, by number (the `wasi` crate's names and numbers).
const ERRNOS: [wasi::Errno; 77] = [
    wasi::ERRNO_SUCCESS,
    wasi::ERRNO_2BIG,
    wasi::ERRNO_ACCES,
    wasi::ERRNO_ADDRINUSE,
    wasi::ERRNO_ADDRNOTAVAIL,
    wasi::ERRNO_AFNOSUPPORT,
    wasi::ERRNO_AGAIN,
    wasi::ERRNO_ALREADY,
    wasi::ERRNO_BADF,
    wasi::ERRNO_BADMSG,
    wasi::ERRNO_BUSY,
    wasi::ERRNO_CANCELED,
    wasi::ERRNO_CHILD,
    wasi::ERRNO_CONNABORTED,
    wasi::ERRNO_CONNREFUSED,
    wasi::ERRNO_CONNRESET,
    wasi::ERRNO_DEADLK,
    wasi::ERRNO_DESTADDRREQ,
    wasi::ERRNO_DOM,
    wasi::ERRNO_DQUOT,
    wasi::ERRNO_EXIST,
    wasi::ERRNO_FAULT,
    wasi::ERRNO_FBIG,
    wasi::ERRNO_HOSTUNREACH,
    wasi::ERRNO_IDRM,
    wasi::ERRNO_ILSEQ,
    wasi::ERRNO_INPROGRESS,
    wasi::ERRNO_INTR,
    wasi::ERRNO_INVAL,
    wasi::ERRNO_IO,
    wasi::ERRNO_ISCONN,
    wasi::ERRNO_ISDIR,
    wasi::ERRNO_LOOP,
    wasi::ERRNO_MFILE,
    wasi::ERRNO_MLINK,
    wasi::ERRNO_MSGSIZE,
    wasi::ERRNO_MULTIHOP,
    wasi::ERRNO_NAMETOOLONG,
    wasi::ERRNO_NETDOWN,
    wasi::ERRNO_NETRESET,
    wasi::ERRNO_NETUNREACH,
    wasi::ERRNO_NFILE,
    wasi::ERRNO_NOBUFS,
    wasi::ERRNO_NODEV,
    wasi::ERRNO_NOENT,
    wasi::ERRNO_NOEXEC,
    wasi::ERRNO_NOLCK,
    wasi::ERRNO_NOLINK,
    wasi::ERRNO_NOMEM,
    wasi::ERRNO_NOMSG,
    wasi::ERRNO_NOPROTOOPT,
    wasi::ERRNO_NOSPC,
    wasi::ERRNO_NOSYS,
    wasi::ERRNO_NOTCONN,
    wasi::ERRNO_NOTDIR,
    wasi::ERRNO_NOTEMPTY,
    wasi::ERRNO_NOTRECOVERABLE,
    wasi::ERRNO_NOTSOCK,
    wasi::ERRNO_NOTSUP,
    wasi::ERRNO_NOTTY,
    wasi::ERRNO_NXIO,
    wasi::ERRNO_OVERFLOW,
    wasi::ERRNO_OWNERDEAD,
    wasi::ERRNO_PERM,
    wasi::ERRNO_PIPE,
    wasi::ERRNO_PROTO,
    wasi::ERRNO_PROTONOSUPPORT,
    wasi::ERRNO_PROTOTYPE,
    wasi::ERRNO_RANGE,
    wasi::ERRNO_ROFS,
    wasi::ERRNO_SPIPE,
    wasi::ERRNO_SRCH,
    wasi::ERRNO_STALE,
    wasi::ERRNO_TIMEDOUT,
    wasi::ERRNO_TXTBSY,
    wasi::ERRNO_XDEV,
    wasi::ERRNO_NOTCAPABLE,
];

/// An errno by name (`EIO`, `io`, `ENOENT`) or number.
fn errno_number(text: &str) -> Option<u16> {
    if let Ok(n) = text.parse::<u16>() {
        return ERRNOS.iter().any(|e| e.raw() == n).then_some(n);
    }
    let name = text.strip_prefix('E').unwrap_or(text);
    ERRNOS
        .iter()
        .find(|e| e.name().eq_ignore_ascii_case(name))
        .map(|e| e.raw())
}

/// `EIO` for 29.
fn errno_name(n: u16) -> String {
    ERRNOS
        .iter()
        .find(|e| e.raw() == n)
        .map_or_else(|| n.to_string(), |e| format!("E{}", e.name()))
}
/// `text` as a value of type `ty` (integers in decimal or `0x` hex, floats as Rust reads
/// them); `None` if it is not one.
pub fn parse_value(text: &str, ty: &ValType) -> Option<Val> {
    let int = |t: &str| -> Option<i128> {
        let (negative, digits) = match t.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, t),
        };
        let magnitude = match digits.strip_prefix("0x") {
            Some(hex) => i128::from_str_radix(hex, 16).ok()?,
            None => digits.parse::<i128>().ok()?,
        };
        Some(if negative { -magnitude } else { magnitude })
    };
    match ty {
        // Either sign's range: `-1` and `4294967295` are the same i32.
        ValType::I32 => {
            let n = int(text)?;
            (i128::from(i32::MIN)..=i128::from(u32::MAX))
                .contains(&n)
                .then_some(Val::I32(n as i32))
        }
        ValType::I64 => {
            let n = int(text)?;
            (i128::from(i64::MIN)..=i128::from(u64::MAX))
                .contains(&n)
                .then_some(Val::I64(n as i64))
        }
        ValType::F32 => text.parse::<f32>().ok().map(|f| Val::F32(f.to_bits())),
        ValType::F64 => text.parse::<f64>().ok().map(|f| Val::F64(f.to_bits())),
        _ => None,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_target_action_and_call() {
        let i = Injection::parse("wasi:fd_write=errno:EIO@3").unwrap();
        assert_eq!(
            (i.module.as_str(), i.name.as_str(), &i.action, i.call),
            (WASI, "fd_write", &Action::Errno(29), Some(3))
        );
        assert_eq!(i.action_text(), "errno:EIO");
        let i = Injection::parse("env::get_value=return:-7").unwrap();
        assert_eq!(i.target(), "env::get_value");
        assert_eq!(i.action, Action::Return("-7".into()));
        assert_eq!(i.call, None);
        assert_eq!(
            Injection::parse("wasi:path_open=errno:noent")
                .unwrap()
                .action,
            Action::Errno(44)
        );
        assert_eq!(
            Injection::parse("wasi:fd_read=errno:8")
                .unwrap()
                .action_text(),
            "errno:EBADF"
        );
        assert_eq!(
            Injection::parse("wasi:proc_exit=trap").unwrap().action,
            Action::Trap
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, says) in [
            ("wasi:fd_write", "TARGET=ACTION"),
            ("wasi:=trap", "empty"),
            ("::f=trap", "empty"),
            ("wasi:fd_write=errno:EWHAT", "not a WASI errno"),
            ("wasi:fd_write=errno:77", "not a WASI errno"),
            ("wasi:fd_write=explode", "the action is"),
            ("wasi:fd_write=trap@0", "a number from 1"),
            ("wasi:fd_write=trap@x", "a number from 1"),
            ("wasi:fd_write=return:", "needs a value"),
        ] {
            let error = Injection::parse(spec).unwrap_err();
            assert!(error.contains(says), "{spec}: {error}");
        }
    }

    #[test]
    fn values_parse_as_the_result_type() {
        assert_eq!(
            parse_value("-1", &ValType::I32).map(|v| v.unwrap_i32()),
            Some(-1)
        );
        assert_eq!(
            parse_value("0xffffffff", &ValType::I32).map(|v| v.unwrap_i32()),
            Some(-1)
        );
        assert!(parse_value("4294967296", &ValType::I32).is_none());
        assert_eq!(
            parse_value("1.5", &ValType::F64).map(|v| v.unwrap_f64()),
            Some(1.5)
        );
        assert!(parse_value("x", &ValType::I64).is_none());
    }
}
