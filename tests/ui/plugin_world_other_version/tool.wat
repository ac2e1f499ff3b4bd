(component
  (instance $empty)
  (export "toolhost:plugin/tool@0.2.0" (instance $empty))
)
