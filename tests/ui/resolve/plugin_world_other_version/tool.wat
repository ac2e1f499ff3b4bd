(component
  (instance $empty)
  (export "toolhost:plugin/tool@0.3.0" (instance $empty))
)
