(component
  (type $r (resource (rep i32)))
  (export $thing "thing" (type $r))
  (core module $m (func (export "take") (param i32)))
  (core instance $i (instantiate $m))
  (func (export "take") (param "handle" (own $thing)) (canon lift (core func $i "take")))
)
