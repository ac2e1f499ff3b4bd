//! A typed component (no `describe`, no toolhost WIT): every export is a tool whose schema
//! the host derives from the WIT types. Covers every WIT type the mapping has.

wit_bindgen::generate!({ path: "wit", world: "typed" });

use exports::example::typed::weather::{
    Conditions, Everything, Extras, Guest as Weather, Report, WhereTo,
};

struct Typed;

static LAST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
static BLOCK: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

impl Guest for Typed {
    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }

    fn greet(name: String, initial: char) -> String {
        format!("hello {name} ({initial})")
    }

    fn float(nan: bool) -> f32 {
        if nan { f32::NAN } else { 1.5 }
    }

    fn remember(value: String) -> Option<String> {
        let previous = LAST.lock().unwrap_or_else(|e| e.into_inner()).replace(value);
        let mut block = BLOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dirty = !block.is_empty();
        block.resize(1 << 20, 0xAB);
        previous.or(dirty.then(|| "a mebibyte on the heap".to_string()))
    }

    fn bytes(count: u32) -> Vec<u8> {
        vec![7; count as usize]
    }

    fn crash(message: String) {
        eprintln!("about to fail: {message}");
        panic!("{message}");
    }

    fn check(outcome: Result<u32, String>, flags_on: Vec<bool>) -> Result<(), u32> {
        match outcome {
            Ok(n) if flags_on.iter().all(|f| *f) => Err(n),
            _ => Ok(()),
        }
    }

    fn read_text(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
    }
}

impl Weather for Typed {
    fn echo_everything(value: Everything) -> Everything {
        value
    }

    fn get_forecast(where_to: WhereTo, days: Option<u8>, extras: Extras) -> Result<Report, String> {
        let place = match where_to {
            WhereTo::Here => "here".to_string(),
            WhereTo::Named(name) if name == "nowhere" => return Err(format!("unknown place {name}")),
            WhereTo::Named(name) => name,
            WhereTo::At((lat, lon)) => format!("{lat},{lon}"),
        };
        Ok(Report {
            place,
            celsius: 21.5,
            conditions: if extras.contains(Extras::WIND) { Conditions::Cloudy } else { Conditions::Sunny },
            days: (1..=days.unwrap_or(1)).collect(),
            note: extras.contains(Extras::HUMIDITY).then(|| "humid".to_string()),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn integers(a: i8, b: u8, c: i16, d: u16, e: i32, f: u32, g: i64, h: u64) -> (i8, u8, i16, u16, i32, u32, i64, u64) {
        (a, b, c, d, e, f, g, h)
    }
}

export!(Typed);
