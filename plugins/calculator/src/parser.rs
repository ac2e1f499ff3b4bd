//! Tokenizer and recursive-descent evaluator for `calculate`.

use std::fmt;

/// Why an expression could not be evaluated; `at` is a 1-based character position.
#[derive(Debug, PartialEq)]
pub struct EvalError {
    pub at: usize,
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at position {}: {}", self.at, self.message)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f64),
    Ident(String),
    Op(char),
    LParen,
    RParen,
    Comma,
    End,
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 200;

/// Evaluates `source` and returns a finite number.
pub fn evaluate(source: &str) -> Result<f64, EvalError> {
    let tokens = tokenize(source)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let value = parser.expr()?;
    let (token, at) = parser.peek();
    if *token != Token::End {
        return Err(EvalError {
            at,
            message: format!("unexpected {}", describe(token)),
        });
    }
    if !value.is_finite() {
        return Err(EvalError {
            at: 1,
            message: "the result is not a finite real number".into(),
        });
    }
    Ok(value)
}

fn tokenize(source: &str) -> Result<Vec<(Token, usize)>, EvalError> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // Scientific notation: 1e3, 2.5E-4.
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    i = j;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = chars[start..i].iter().collect();
            let value = text.parse::<f64>().map_err(|_| EvalError {
                at,
                message: format!("{text:?} is not a number"),
            })?;
            tokens.push((Token::Number(value), at));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push((
                Token::Ident(
                    chars[start..i]
                        .iter()
                        .collect::<String>()
                        .to_ascii_lowercase(),
                ),
                at,
            ));
        } else {
            let token = match c {
                '+' | '-' | '*' | '/' | '%' | '^' => Token::Op(c),
                '(' => Token::LParen,
                ')' => Token::RParen,
                ',' => Token::Comma,
                _ => {
                    return Err(EvalError {
                        at,
                        message: format!("unexpected character {c:?}"),
                    });
                }
            };
            tokens.push((token, at));
            i += 1;
        }
    }
    tokens.push((Token::End, chars.len() + 1));
    Ok(tokens)
}

fn describe(token: &Token) -> String {
    match token {
        Token::Number(n) => format!("number {n}"),
        Token::Ident(name) => format!("name {name:?}"),
        Token::Op(c) => format!("operator {c:?}"),
        Token::LParen => "\"(\"".into(),
        Token::RParen => "\")\"".into(),
        Token::Comma => "\",\"".into(),
        Token::End => "end of expression".into(),
    }
}

struct Parser {
    tokens: Vec<(Token, usize)>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> (&Token, usize) {
        let (token, at) = &self.tokens[self.pos.min(self.tokens.len() - 1)];
        (token, *at)
    }

    fn next(&mut self) -> (Token, usize) {
        let (token, at) = self.peek();
        let token = token.clone();
        if token != Token::End {
            self.pos += 1;
        }
        (token, at)
    }

    fn expect(&mut self, wanted: Token) -> Result<(), EvalError> {
        let (token, at) = self.next();
        if token == wanted {
            Ok(())
        } else {
            Err(EvalError {
                at,
                message: format!(
                    "expected {} but found {}",
                    describe(&wanted),
                    describe(&token)
                ),
            })
        }
    }

    fn enter(&mut self, at: usize) -> Result<(), EvalError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(EvalError {
                at,
                message: format!("expression nests deeper than {MAX_DEPTH} levels"),
            });
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<f64, EvalError> {
        let mut value = self.term()?;
        loop {
            match self.peek() {
                (Token::Op('+'), _) => {
                    self.next();
                    value += self.term()?;
                }
                (Token::Op('-'), _) => {
                    self.next();
                    value -= self.term()?;
                }
                _ => return Ok(value),
            }
        }
    }

    fn term(&mut self) -> Result<f64, EvalError> {
        let mut value = self.unary()?;
        loop {
            let (token, at) = self.peek();
            let op = match token {
                Token::Op(c @ ('*' | '/' | '%')) => *c,
                _ => return Ok(value),
            };
            self.next();
            let rhs = self.unary()?;
            value = match op {
                '*' => value * rhs,
                _ if rhs == 0.0 => {
                    let what = if op == '/' { "division" } else { "modulo" };
                    return Err(EvalError {
                        at,
                        message: format!("{what} by zero"),
                    });
                }
                '/' => value / rhs,
                _ => value % rhs,
            };
        }
    }

    fn unary(&mut self) -> Result<f64, EvalError> {
        let (token, at) = self.peek();
        match token {
            Token::Op('-') => {
                self.next();
                self.enter(at)?;
                let value = self.unary();
                self.depth -= 1;
                Ok(-value?)
            }
            Token::Op('+') => {
                self.next();
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<f64, EvalError> {
        let base = self.atom()?;
        if let (Token::Op('^'), at) = self.peek() {
            self.next();
            self.enter(at)?;
            let exponent = self.unary();
            self.depth -= 1;
            return Ok(base.powf(exponent?));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<f64, EvalError> {
        let (token, at) = self.next();
        match token {
            Token::Number(n) => Ok(n),
            Token::LParen => {
                self.enter(at)?;
                let value = self.expr();
                self.depth -= 1;
                let value = value?;
                self.expect(Token::RParen)?;
                Ok(value)
            }
            Token::Ident(name) => match name.as_str() {
                "pi" => Ok(std::f64::consts::PI),
                "e" => Ok(std::f64::consts::E),
                _ => self.call(&name, at),
            },
            other => Err(EvalError {
                at,
                message: format!(
                    "expected a number, a name or \"(\" but found {}",
                    describe(&other)
                ),
            }),
        }
    }

    fn call(&mut self, name: &str, at: usize) -> Result<f64, EvalError> {
        let arity: (usize, usize) = match name {
            "sqrt" | "ln" | "log10" | "sin" | "cos" | "tan" | "abs" => (1, 1),
            "round" => (1, 2),
            "min" | "max" => (1, usize::MAX),
            _ => {
                return Err(EvalError {
                    at,
                    message: format!("unknown name {name:?}"),
                });
            }
        };
        if !matches!(self.peek().0, Token::LParen) {
            return Err(EvalError {
                at,
                message: format!("function {name} needs its arguments in parentheses"),
            });
        }
        self.next();
        self.enter(at)?;
        let args = self.arguments();
        self.depth -= 1;
        let args = args?;
        if args.len() < arity.0 || args.len() > arity.1 {
            let expected = match arity {
                (1, 1) => "1 argument".to_string(),
                (1, 2) => "1 or 2 arguments".to_string(),
                _ => "at least 1 argument".to_string(),
            };
            return Err(EvalError {
                at,
                message: format!("{name} takes {expected}, not {}", args.len()),
            });
        }
        let x = args[0];
        let domain = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(EvalError {
                    at,
                    message: format!("{name} is undefined for {what}"),
                })
            }
        };
        Ok(match name {
            "sqrt" => {
                domain(x >= 0.0, "negative numbers")?;
                x.sqrt()
            }
            "ln" => {
                domain(x > 0.0, "zero and negative numbers")?;
                x.ln()
            }
            "log10" => {
                domain(x > 0.0, "zero and negative numbers")?;
                x.log10()
            }
            "sin" => x.sin(),
            "cos" => x.cos(),
            "tan" => x.tan(),
            "abs" => x.abs(),
            "round" => {
                let digits = args.get(1).copied().unwrap_or(0.0);
                if digits.fract() != 0.0 || !(0.0..=15.0).contains(&digits) {
                    return Err(EvalError {
                        at,
                        message: "round's digits must be a whole number from 0 to 15".into(),
                    });
                }
                let scale = 10f64.powi(digits as i32);
                (x * scale).round() / scale
            }
            "min" => args.iter().copied().fold(f64::INFINITY, f64::min),
            _ => args.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    fn arguments(&mut self) -> Result<Vec<f64>, EvalError> {
        let mut args = vec![self.expr()?];
        loop {
            let (token, at) = self.next();
            match token {
                Token::Comma => args.push(self.expr()?),
                Token::RParen => return Ok(args),
                other => {
                    return Err(EvalError {
                        at,
                        message: format!("expected \",\" or \")\" but found {}", describe(&other)),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(evaluate("2 + 3 * 4").unwrap(), 14.0);
        assert_eq!(evaluate("2 ^ 3 ^ 2").unwrap(), 512.0);
        assert_eq!(evaluate("-2 ^ 2").unwrap(), -4.0);
        assert_eq!(evaluate("(1 + 2) * -3").unwrap(), -9.0);
        assert_eq!(evaluate("7 % 4").unwrap(), 3.0);
        assert_eq!(evaluate("max(1, 5, 3) + min(4, 2)").unwrap(), 7.0);
        assert_eq!(evaluate("round(3.14159, 2)").unwrap(), 3.14);
        assert_eq!(evaluate("1.5e3").unwrap(), 1500.0);
    }

    #[test]
    fn errors_name_the_position() {
        assert_eq!(
            evaluate("1 / 0").unwrap_err().to_string(),
            "at position 3: division by zero"
        );
        assert_eq!(evaluate("2 +").unwrap_err().at, 4);
        assert!(
            evaluate("foo(1)")
                .unwrap_err()
                .message
                .contains("unknown name")
        );
        assert!(evaluate("sqrt(-1)").is_err());
        assert!(evaluate(&"(".repeat(10_000)).is_err());
    }
}
