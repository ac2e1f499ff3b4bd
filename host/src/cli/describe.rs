//! `toolhost describe FILE.wasm`: what a component is before anyone writes an ensemble for
//! it: the world it is built for, its imports (and which the host does not provide), its
//! tools with their schemas, its prompts and resources (0.3.0), and an ensemble file ready
//! to paste (with the grant of settings, commented out, for a component that reads some).

use super::settings::Settings;
use super::terminal::safe;
use serde_json::{Value, json};
use std::path::Path;
use std::process::ExitCode;
use toolhost::runtime::{Inspection, PromptSpec, ToolDescription, World};

pub(crate) async fn run(
    settings: &Settings,
    file: &Path,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let max = settings.compile.max_component_bytes;
    let bytes = toolhost::config::read_limited(file, max)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let runtime = settings.bare_runtime()?;
    let inspection = match runtime.inspect(file, bytes).await {
        Ok(inspection) => inspection,
        // A file that is no component (a core module, say) is a bad input: exit 1.
        Err(e) => {
            super::logging::say(tracing::Level::ERROR, &format!("error: {e:#}"));
            return Ok(ExitCode::from(1));
        }
    };
    // The path as an ensemble file in the ensembles directory names it: relative to that
    // folder, so that the project can move.
    let component = relative_to(&settings.ensembles, file);
    let ensemble = ensemble_text(file, &component, &inspection);
    if as_json {
        let tools = match &inspection.tools {
            Ok(tools) => json!(tools.iter().map(tool_json).collect::<Vec<_>>()),
            Err(_) => Value::Null,
        };
        let report = json!({
            "file": file,
            "blake3": inspection.hash.to_string(),
            "world": match &inspection.world {
                Ok(World::Plugin) => json!("toolhost:plugin@0.1.0"),
                Ok(World::Plugin2) => json!("toolhost:plugin@0.2.0"),
                Ok(World::Plugin3) => json!("toolhost:plugin@0.3.0"),
                Ok(World::Typed) => json!("typed"),
                Err(_) => Value::Null,
            },
            "world_error": inspection.world.as_ref().err(),
            "imports": inspection.imports.iter().map(|i| json!({
                "name": i.name, "provided": i.provided,
            })).collect::<Vec<_>>(),
            "exports": inspection.exports,
            "unused_exports": inspection.exports.iter()
                .filter(|e| !used(e, &inspection)).collect::<Vec<_>>(),
            "tools": tools,
            "prompts": inspection.offers.prompts.iter().map(prompt_json).collect::<Vec<_>>(),
            "resources": inspection.offers.resources.iter().map(|r| json!({
                "uri": r.uri, "name": r.name, "title": r.title,
                "description": r.description, "mime_type": r.mime_type,
            })).collect::<Vec<_>>(),
            "resource_templates": inspection.offers.templates.iter().map(|t| json!({
                "uri_template": t.uri_template, "name": t.name, "title": t.title,
                "description": t.description, "mime_type": t.mime_type,
            })).collect::<Vec<_>>(),
            "error": inspection.tools.as_ref().err().map(ToString::to_string),
            "ensemble": ensemble,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(file, &inspection, ensemble.as_deref());
    }
    Ok(if inspection.tools.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn tool_json(tool: &ToolDescription) -> Value {
    let schema = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    json!({
        "tool": tool.name,
        "name": tool.default_name.as_ref().unwrap_or(&tool.name),
        "description": tool.description,
        "input_schema": schema(&tool.input_schema),
        "output_schema": tool.output.as_ref().map(|o| schema(&o.schema)),
    })
}

fn prompt_json(prompt: &PromptSpec) -> Value {
    json!({
        "name": prompt.name,
        "title": prompt.title,
        "description": prompt.description,
        "arguments": prompt.arguments.iter().map(|a| json!({
            "name": a.name, "description": a.description, "required": a.required,
        })).collect::<Vec<_>>(),
    })
}

fn print_text(file: &Path, inspection: &Inspection, ensemble: Option<&str>) {
    let world = match &inspection.world {
        Ok(World::Plugin) => "a toolhost:plugin@0.1.0 component (describe() and call())".into(),
        Ok(World::Plugin2) => "a toolhost:plugin@0.2.0 component (describe() and call(), \
                               results of content items, progress, sampling, elicitation)"
            .into(),
        Ok(World::Plugin3) => "a toolhost:plugin@0.3.0 component (0.2.0, and prompts and \
                               resources beside its tools)"
            .into(),
        Ok(World::Typed) => {
            "a typed component (any world: each exported function is a tool)".into()
        }
        Err(why) => format!("not loadable: {why}"),
    };
    outln!("{}: {world}", safe(&file.display().to_string()));
    outln!("blake3: {}", inspection.hash);
    outln!("imports:");
    for import in &inspection.imports {
        let note = if import.provided {
            ""
        } else {
            "   <- not provided by toolhost"
        };
        outln!("  {}{note}", safe(&import.name));
    }
    outln!("exports:");
    for export in &inspection.exports {
        let note = if used(export, inspection) {
            ""
        } else {
            "   <- no tools in it (the toolchain's own); not used"
        };
        outln!("  {}{note}", safe(export));
    }
    match &inspection.tools {
        Ok(tools) => {
            outln!("tools:");
            for tool in tools {
                let name = tool.default_name.as_ref().unwrap_or(&tool.name);
                let id = if *name == tool.name {
                    String::new()
                } else {
                    format!(" (tool = \"{}\")", tool.name)
                };
                outln!("  {}{}: {}", safe(name), safe(&id), safe(&tool.description));
                outln!("    arguments: {}", safe(&tool.input_schema));
                if let Some(output) = &tool.output {
                    outln!("    result: {}", safe(&output.schema));
                }
            }
        }
        Err(error) => outln!("error: {}", safe(&error.to_string())),
    }
    print_offers(inspection);
    if let Some(ensemble) = ensemble {
        outln!(
            "\nAn ensemble to start from (save it in the ensembles folder; the component's path \
             is relative to it):\n"
        );
        out!("{}", safe(ensemble));
    }
}

/// A 0.3.0 component's prompts, resources and templates, when it lists any.
fn print_offers(inspection: &Inspection) {
    let offers = &inspection.offers;
    if !offers.prompts.is_empty() {
        outln!("prompts:");
        for prompt in &offers.prompts {
            let arguments: Vec<String> = (prompt.arguments.iter())
                .map(|a| format!("{}{}", a.name, if a.required { "" } else { "?" }))
                .collect();
            outln!(
                "  {}({}): {}",
                safe(&prompt.name),
                safe(&arguments.join(", ")),
                safe(&prompt.description)
            );
        }
    }
    if !offers.resources.is_empty() || !offers.templates.is_empty() {
        outln!("resources:");
        let uris = (offers.resources.iter()).map(|r| (&r.uri, &r.name, &r.mime_type));
        let templates = (offers.templates.iter()).map(|t| (&t.uri_template, &t.name, &t.mime_type));
        for (uri, name, mime) in uris.chain(templates) {
            let mime = mime
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            outln!("  {}: {}{}", safe(uri), safe(name), safe(&mime));
        }
    }
}

/// Whether toolhost uses `export`: the plugin world's tool interface, or an instance or
/// function a typed component's tools come from. Toolchains add exports of their own
/// (componentize-py's `exports`), which are listed as unused.
fn used(export: &str, inspection: &Inspection) -> bool {
    match &inspection.world {
        Ok(World::Plugin | World::Plugin2) => export.starts_with("toolhost:plugin/tool@"),
        Ok(World::Plugin3) => {
            export.starts_with("toolhost:plugin/tool@")
                || export.starts_with("toolhost:plugin/offers@")
        }
        // Tools that could not be read say nothing of which exports they come from.
        Ok(World::Typed) if inspection.tools.is_err() => true,
        Ok(World::Typed) => {
            // `example:greeter/greetings@0.1.0` offers `greetings/greet`.
            let interface = export.split('@').next().unwrap_or(export);
            let short = interface.rsplit('/').next().unwrap_or(interface);
            inspection.tools.as_ref().is_ok_and(|tools| {
                tools.iter().any(|t| {
                    t.name == export
                        || t.name
                            .strip_prefix(short)
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            })
        }
        Err(_) => true,
    }
}

/// `file` as a path relative to `dir` (both made absolute; through `..` where they part),
/// or absolute when they share nothing but the root.
fn relative_to(dir: &Path, file: &Path) -> String {
    let absolute = |p: &Path| {
        std::fs::canonicalize(p)
            .or_else(|_| std::path::absolute(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    let (dir, file) = (absolute(dir), absolute(file));
    let (mut from, mut to) = (dir.components().peekable(), file.components().peekable());
    let mut shared = 0;
    while let (Some(a), Some(b)) = (from.peek(), to.peek())
        && a == b
    {
        from.next();
        to.next();
        shared += 1;
    }
    if shared <= 1 {
        return file.display().to_string();
    }
    let mut path = std::path::PathBuf::new();
    for _ in from {
        path.push("..");
    }
    path.extend(to);
    path.display().to_string()
}

/// What a component that imports `wasi:config/store` gets in its ensemble: the ensemble's
/// grant of settings, commented out, with placeholder keys (which keys a component reads is
/// in its code, not in its imports).
const SETTINGS_GRANT: &str = concat!(
    "\n",
    "# It reads settings through wasi:config/store: grant the ones its tools read (these keys\n",
    "# are placeholders), and uncomment the `capabilities` line of each tool that reads them.\n",
    "# [grants.config]\n",
    "# api-base = \"https://api.example.org\"\n",
    "# api-key = { env = \"API_KEY\" }   # a secret: from the host's environment, never this file\n",
);
/// What each tool of such a component asks for, commented out.
const SETTINGS_ASKED: &str = "# capabilities = { config = [\"api-base\", \"api-key\"] }\n";

/// Whether the component imports `wasi:config/store` (at either version the host links).
fn reads_settings(inspection: &Inspection) -> bool {
    (inspection.imports.iter()).any(|import| import.name.starts_with("wasi:config/store@"))
}

/// An ensemble file that offers every tool of the component, each as a flat invoker the
/// operator can edit or delete; `None` when it offers no tools. The component is named by
/// `component`, unpinned (a pin refuses every rebuild until it is updated), with the pin
/// for a release in a comment; a component that reads settings gets their grant and each
/// tool's `capabilities`, commented out.
fn ensemble_text(file: &Path, component: &str, inspection: &Inspection) -> Option<String> {
    let tools = inspection.tools.as_ref().ok()?;
    let stem = file.file_stem()?.to_string_lossy().to_lowercase();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    let name = if name.is_empty() { "tools" } else { name };
    let quote = |text: &str| toml_string(text);
    let mut out = format!(
        "schema-version = 1\n\n[ensemble]\nname = {}\ncomponent = {}\n\
         # For a release, pin this build: any other file is then refused until the pin changes.\n\
         # blake3 = {}\n",
        quote(name),
        quote(component),
        quote(&inspection.hash.to_string()),
    );
    let settings = reads_settings(inspection);
    if settings {
        out.push_str(SETTINGS_GRANT);
    }
    for tool in tools {
        let invoker = tool.default_name.as_ref().unwrap_or(&tool.name);
        out.push_str(&format!("\n[[invokers]]\nname = {}\n", quote(invoker)));
        if *invoker != tool.name {
            out.push_str(&format!("tool = {}\n", quote(&tool.name)));
        }
        out.push_str(&format!("description = {}\n", quote(&tool.description)));
        if settings {
            out.push_str(SETTINGS_ASKED);
        }
    }
    Some(out)
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}
