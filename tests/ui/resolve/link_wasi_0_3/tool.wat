(component
  (import "wasi:cli/environment@0.3.0" (instance (export "get-arguments" (func (result (list string))))))
)
