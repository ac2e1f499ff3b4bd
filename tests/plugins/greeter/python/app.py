"""A typed Python tool, built with componentize-py against tests/plugins/greeter/wit: each
function of the exported interface is a tool whose schema toolhost derives from the WIT."""
from wit_world import exports
from wit_world.exports.greetings import Greeting
from componentize_py_types import Err


class Greetings(exports.Greetings):
    def greet(self, name, times):
        if name == "":
            raise Err("the name is empty")
        text = " ".join([f"hello {name}"] * (1 if times is None else times))
        return Greeting(text=text, length=len(text))

    def explode(self, message):
        raise ValueError(message)
