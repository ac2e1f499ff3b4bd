(component
  (instance $empty)
  (export "toolhost:plugin/tool@0.4.0" (instance $empty))
)
