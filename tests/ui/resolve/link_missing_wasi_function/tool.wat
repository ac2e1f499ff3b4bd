(component
  (import "wasi:cli/environment@0.2.0" (instance (export "get-everything" (func))))
)
