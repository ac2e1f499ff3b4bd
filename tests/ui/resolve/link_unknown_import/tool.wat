(component
  (import "wasi:foo/bar@0.2.0" (instance (export "go" (func))))
)
