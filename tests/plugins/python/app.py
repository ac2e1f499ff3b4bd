"""A Python tool for the test suite, built with componentize-py against
wit/toolhost-plugin-0.1.0: `shout` returns its text in capitals, `explode` raises."""
import json
from wit_world import exports
from wit_world.imports import types
from componentize_py_types import Err

SCHEMA = '{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}'


class Tool(exports.Tool):
    def describe(self):
        return [types.ToolSpec(name="shout", description="Say it louder.", input_schema=SCHEMA),
                types.ToolSpec(name="explode", description="Raises an exception.",
                               input_schema=SCHEMA)]

    def call(self, name, arguments):
        args = json.loads(arguments)
        if name == "explode":
            raise ValueError(args["text"])
        if name != "shout":
            raise Err(types.ToolError_Failed(f"no tool {name}"))
        if args["text"] == "":
            raise Err(types.ToolError_InvalidArguments("text is empty"))
        return args["text"].upper()
