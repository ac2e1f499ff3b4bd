"""A Python tool for the test suite, built with componentize-py against
wit/toolhost-plugin-0.1.0: `shout` returns its text in capitals."""
import json
from wit_world import exports
from wit_world.imports import types
from componentize_py_types import Err


class Tool(exports.Tool):
    def describe(self):
        return [types.ToolSpec(name="shout", description="Say it louder.",
                               input_schema='{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}')]

    def call(self, name, arguments):
        args = json.loads(arguments)
        if name != "shout":
            raise Err(types.ToolError_Failed(f"no tool {name}"))
        return args["text"].upper()
