//! The README's run command (`bash deploy/run`) on a fresh machine, with stand-ins for the tools it
//! calls: it installs cmake when it is missing, and only then, before building and starting
//! the demo configuration (or the configuration it is given). That the demo then serves with
//! no backend installed is `tests/cli.rs`'s test of the real binary.

mod common;
use common::*;
use std::path::Path;

/// A stand-in for a command: appends its name and arguments to `calls.log`.
fn stand_in(bin: &Path, name: &str, then: &str) {
    let path = bin.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/bash\necho \"{name} $*\" >> \"{}/calls.log\"\n{then}\n",
            bin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the repository's `deploy/run` with only `bin` on its PATH; the calls it made, in order.
fn run(bin: &Path, args: &[&str]) -> (bool, Vec<String>) {
    let _ = std::fs::remove_file(bin.join("calls.log"));
    let script = format!("{}/deploy/run", env!("CARGO_MANIFEST_DIR"));
    let output = std::process::Command::new("/bin/bash")
        .arg(&script)
        .args(args)
        .env_clear()
        .env("PATH", bin)
        .output()
        .expect("run bash");
    let calls = std::fs::read_to_string(bin.join("calls.log")).unwrap_or_default();
    (
        output.status.success(),
        calls.lines().map(str::to_string).collect(),
    )
}

#[test]
fn run_installs_cmake_when_missing_then_starts_the_demo() {
    let dir = temp_dir("run-script");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    stand_in(&bin, "sudo", "exec \"$@\"");
    // Installing cmake puts a cmake on the PATH, as the real package does.
    let cmake = bin.join("cmake");
    stand_in(
        &bin,
        "apt-get",
        &format!(
            "if [ \"$1\" = install ]; then printf '#!/bin/bash\\n' > {0}; /bin/chmod +x {0}; fi",
            cmake.display()
        ),
    );
    stand_in(&bin, "cargo", "");

    let (ok, calls) = run(&bin, &[]);
    assert!(ok, "{calls:?}");
    let apt: Vec<&String> = calls.iter().filter(|c| c.starts_with("apt-get")).collect();
    assert_eq!(apt.len(), 2, "update, then install: {calls:?}");
    assert!(
        apt[1].contains("install") && apt[1].contains("cmake"),
        "{calls:?}"
    );
    assert_eq!(
        calls.last().map(String::as_str),
        Some("cargo run --release --locked --bin sluice -- --config gateway.yaml"),
        "then builds and starts the demo: {calls:?}"
    );

    let (ok, calls) = run(&bin, &["--config", "mine.yaml"]);
    assert!(ok, "{calls:?}");
    assert!(
        calls.iter().all(|c| !c.starts_with("apt-get")),
        "cmake is there now: nothing is installed: {calls:?}"
    );
    assert_eq!(
        calls,
        ["cargo run --release --locked --bin sluice -- --config mine.yaml"],
        "the arguments given replace the demo's"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn run_without_cargo_says_where_to_get_it() {
    let dir = temp_dir("run-script-no-cargo");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    stand_in(&bin, "cmake", "");
    let script = format!("{}/deploy/run", env!("CARGO_MANIFEST_DIR"));
    let output = std::process::Command::new("/bin/bash")
        .arg(&script)
        .env_clear()
        .env("PATH", &bin)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("https://rustup.rs"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}
