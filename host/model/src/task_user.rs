//! The host user a job's tasks run as (`user:` in a job spec), and the
//! pools' allow-lists of such users (`task_users:` in a pool spec).
//!
//! A job may name a user only where its pool's operator allowed that user
//! for the pool (the job manager checks at create and update); root and the
//! agent's own user are never allowed (root by name or uid 0 here, the
//! agent's uid by the agent at launch, the only place it is known). Without
//! `user:` each run gets a uid of its own (decision 0047).

/// Most users one pool may allow.
pub const MAX_TASK_USERS: usize = 64;

/// Checks one user as a job or a pool names it: a user name of the host
/// (`[A-Za-z0-9_][A-Za-z0-9_.-]*`, at most 32 bytes, as `useradd` takes them)
/// or a numeric uid from 1 to 2^31-1. Root (`root`, `0`) is refused: a task
/// running as root could read every other task's secrets and the agent's key.
pub fn check_user(user: &str) -> Result<(), String> {
    if user.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if user.bytes().all(|b| b.is_ascii_digit()) {
        return match user.parse::<u32>() {
            Ok(0) => Err("uid 0 is root: tasks never run as root".to_owned()),
            Ok(uid) if uid <= i32::MAX as u32 => Ok(()),
            _ => Err(format!("`{user}` is not a uid (1 to {})", i32::MAX)),
        };
    }
    let first_ok = user.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest_ok = user.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if user.len() > 32 || !first_ok || !rest_ok {
        return Err(format!(
            "`{}` is not a user name (1 to 32 of [A-Za-z0-9_.-], not starting with `.` or `-`) nor a uid",
            user.escape_debug()
        ));
    }
    if user == "root" {
        return Err("`root`: tasks never run as root".to_owned());
    }
    Ok(())
}

/// Checks a pool's allow-list: at most [`MAX_TASK_USERS`] entries, each a
/// user [`check_user`] accepts, none twice.
pub fn check_allow_list(users: &[String]) -> Result<(), String> {
    if users.len() > MAX_TASK_USERS {
        return Err(format!("{} entries, at most {MAX_TASK_USERS}", users.len()));
    }
    for (i, u) in users.iter().enumerate() {
        check_user(u).map_err(|e| format!("[{i}]: {e}"))?;
        if users[..i].contains(u) {
            return Err(format!("[{i}]: `{u}` appears twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_uids_are_accepted_and_root_never() {
        for ok in ["nobody", "team-b", "svc_batch", "_apt", "u1.2", "1000", "65534", "2147483647"] {
            assert_eq!(check_user(ok), Ok(()), "{ok}");
        }
        for bad in ["", "root", "0", "000", "-x", ".x", "a b", "a/b", "a\u{1b}[2J", "2147483648", &"a".repeat(33)] {
            assert!(check_user(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_user("0").is_err_and(|e| e.contains("root")));
        assert!(check_allow_list(&["a".into(), "a".into()]).is_err_and(|e| e.contains("twice")));
        assert!(check_allow_list(&["nobody".into(), "root".into()]).is_err_and(|e| e.starts_with("[1]")));
        assert!(check_allow_list(&vec!["x".to_owned(); MAX_TASK_USERS + 1]).is_err());
    }
}
