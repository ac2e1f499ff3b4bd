//! `toolhost new NAME --lang rust|python|js|c`: a plugin project that builds and answers
//! `toolhost call` as written: the source of one tool, the WIT it is built against, a build
//! script, and an ensemble that names the component it builds (and, on its first line, the
//! JSON Schema written beside it for editors).

use anyhow::Context;
use std::path::Path;
use std::process::ExitCode;
use toolhost::config::file_schemas::Kind;

/// The languages `new` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
    C,
}

/// The WIT of the world this host speaks, copied into every project.
const PLUGIN_WIT: &str = include_str!("../../../wit/toolhost-plugin-0.1.0/plugin.wit");

/// A project name as the command line takes it (a bad one is a usage error, exit 2):
/// `[a-z0-9-]`, starting with a letter, 1 to 64 characters, since it names the ensemble and
/// the component.
pub(crate) fn project_name(name: &str) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        let hint = if name.contains('_') {
            format!(" (try `{}`)", name.replace('_', "-").to_ascii_lowercase())
        } else {
            String::new()
        };
        return Err(format!(
            "a project name is [a-z0-9-], starts with a letter, 1 to 64 characters (it names \
             the ensemble and the component){hint}"
        ));
    }
    Ok(name.to_string())
}

pub(crate) fn run(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let root = dir.map_or_else(|| Path::new(name).to_path_buf(), Path::to_path_buf);
    if root.exists() {
        // The work cannot be done as asked (exit 1), not a host that cannot start (3).
        super::logging::say(
            tracing::Level::ERROR,
            &format!(
                "error: {} exists already; pick another name, or another folder with --dir",
                root.display()
            ),
        );
        return Ok(ExitCode::from(1));
    }
    // The tool the model sees; the crate name as cargo writes the .wasm file.
    let tool = "hello";
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{tool}}", tool)
    };
    let files: Vec<(&str, &str)> = match lang {
        Lang::Rust => vec![
            ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
            ("src/lib.rs", include_str!("templates/rust/lib.rs")),
            ("build.sh", include_str!("templates/rust/build.sh")),
        ],
        Lang::Python => vec![
            ("app.py", include_str!("templates/python/app.py")),
            ("build.sh", include_str!("templates/python/build.sh")),
        ],
        Lang::Js => vec![
            ("app.js", include_str!("templates/js/app.js")),
            ("build.sh", include_str!("templates/js/build.sh")),
        ],
        Lang::C => vec![
            ("tool.c", include_str!("templates/c/tool.c")),
            ("build.sh", include_str!("templates/c/build.sh")),
        ],
    };
    // The first line names the schema written beside it, for editors' completion.
    let ensemble = format!(
        "#:schema ../schemas/{schema}\nschema-version = 1\n\n[ensemble]\nname = \"{name}\"\ncomponent = \"../{name}.wasm\"\n\n\
         [defaults]\ntimeout-ms = 5000\nmemory-mib = 128\n\n\
         # Every tool of the component is offered; to rename one, restrict its schema or mark\n\
         # it destructive, list it:\n# [[invokers]]\n# name = \"{tool}\"\n# destructive = false\n",
        schema = Kind::Ensemble.file_name(),
    );
    let write = |relative: &str, text: &str| -> anyhow::Result<()> {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    for (relative, text) in &files {
        write(relative, &fill(text))?;
    }
    write("wit/plugin.wit", PLUGIN_WIT)?;
    write(&format!("ensembles/{name}.toml"), &ensemble)?;
    write(
        &format!("schemas/{}", Kind::Ensemble.file_name()),
        &Kind::Ensemble.schema_text(),
    )?;
    make_executable(&root.join("build.sh"))?;
    let language = match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
        Lang::C => "C",
    };
    outln!("wrote {} (a {language} plugin); then:", root.display());
    outln!("  cd {} && ./build.sh", root.display());
    outln!("  toolhost --ensembles ensembles call {tool} '{{\"name\": \"Ada\"}}'");
    Ok(ExitCode::SUCCESS)
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}
