(component
  (core module $m)
)
