//! Compiles hakmem's C sources (../../src) into a static library with the
//! flags of the repository's Makefile (CFLAGS_BASE, read from it so the two
//! builds cannot drift apart), then, as the Makefile does for libhakmem.a,
//! joins the objects into one whose internal symbols are made local, so they
//! cannot clash with other C code in the program.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    let root = root
        .canonicalize()
        .expect("hakmem's source tree at ../.. (the crate builds from it)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());

    let mut flags = makefile_cflags(&root.join("Makefile"));
    flags.extend(["-O2", "-g"].map(String::from));
    // Without the feature only the hakmem_* names exist: C code keeps libc's malloc.
    if env::var_os("CARGO_FEATURE_OVERRIDE").is_none() {
        flags.push("-DHAKMEM_NO_OVERRIDE".to_string());
    }

    let mut sources: Vec<PathBuf> = fs::read_dir(root.join("src"))
        .expect("reading ../../src")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    let mut objects = Vec::new();
    for src in &sources {
        let obj = out.join(src.file_name().unwrap()).with_extension("o");
        run(Command::new(&cc)
            .current_dir(&root)
            .args(&flags)
            .arg("-c")
            .arg(src)
            .arg("-o")
            .arg(&obj));
        objects.push(obj);
    }
    let joined = out.join("hakmem.o");
    run(Command::new("ld").arg("-r").args(&objects).arg("-o").arg(&joined));
    run(Command::new("objcopy").arg("--localize-hidden").arg(&joined));
    let lib = out.join("libhakmem.a");
    let _ = fs::remove_file(&lib);
    run(Command::new("ar").arg("rcs").arg(&lib).arg(&joined));

    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=hakmem");
    for dir in ["src", "include", "Makefile"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=CC");
}

/// The words of the Makefile's `CFLAGS_BASE = ...` definition (with its
/// backslash-continued lines).
fn makefile_cflags(makefile: &Path) -> Vec<String> {
    let text = fs::read_to_string(makefile).expect("reading ../../Makefile");
    let mut definition = String::new();
    for line in text.lines().skip_while(|l| !l.starts_with("CFLAGS_BASE")) {
        let (body, continued) = match line.strip_suffix('\\') {
            Some(body) => (body, true),
            None => (line, false),
        };
        definition.push_str(body);
        definition.push(' ');
        if !continued {
            break;
        }
    }
    let value = definition.split_once('=').map(|(_, v)| v).unwrap_or("");
    assert!(
        !value.trim().is_empty() && !value.contains('$'),
        "the Makefile has no plain CFLAGS_BASE = ... definition: {value:?}"
    );
    value.split_whitespace().map(String::from).collect()
}

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed: {status}");
}
