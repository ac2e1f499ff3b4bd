"""{{name}}: a toolhost plugin (the toolhost:plugin@0.1.0 world, in wit/). `describe` lists
the tools, `call` runs one; the arguments already passed the tool's schema.

Only modules imported at the top of this file (while building) are in the component."""
import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types

SCHEMA = json.dumps({
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1}},
})


class Tool(exports.Tool):
    def describe(self):
        return [types.ToolSpec(name="{{tool}}", description="Greet someone by name.",
                               input_schema=SCHEMA)]

    def call(self, name, arguments):
        args = json.loads(arguments)
        if name == "{{tool}}":
            return f"Hello, {args['name']}!"
        raise Err(types.ToolError_Failed(f"no tool {name}"))
