"""A toolhost:plugin@0.2.0 tool in Python (componentize-py), for the test suite and the
README: `countdown` reports progress as it goes, `confirm` asks the person first."""
import json
from wit_world import exports
from wit_world.imports import host, types
from componentize_py_types import Err

NUMBER = '{"type":"object","required":["from"],"properties":{"from":{"type":"integer"}}}'
QUESTION = json.dumps({
    "type": "object",
    "required": ["sure"],
    "properties": {"sure": {"type": "boolean", "description": "Really delete it?"}},
})


def text(value):
    return types.ToolResult(content=[types.Content_Text(value)], structured=None)


class Tool(exports.Tool):
    def describe(self):
        return [
            types.ToolSpec(name="countdown", description="Counts down, reporting progress.",
                           input_schema=NUMBER, output_schema=None),
            types.ToolSpec(name="confirm", description="Asks the person before it acts.",
                           input_schema='{"type":"object"}', output_schema=None),
        ]

    def call(self, name, arguments):
        args = json.loads(arguments)
        if name == "countdown":
            start = args["from"]
            for done in range(1, start + 1):
                host.progress(float(done), float(start), f"{start - done} to go")
            return text("liftoff")
        if name == "confirm":
            try:
                answer = host.elicit("Delete the report?", QUESTION)
            except Err as e:  # not granted, no one to ask, over the limit
                return text(f"could not ask: {e.value.value}")
            if isinstance(answer, host.ElicitAnswer_Accept) and json.loads(answer.value)["sure"]:
                return text("deleted")
            return text("kept")
        raise Err(types.ToolError_Failed(f"no tool {name}"))
