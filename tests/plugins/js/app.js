// A JavaScript tool of the toolhost:plugin world, built with componentize-js against
// wit/toolhost-plugin-0.1.0: `shout` returns its text in capitals, `explode` throws.
const object = { type: "object", required: ["text"], properties: { text: { type: "string" } } };

export const tool = {
  describe() {
    return [
      { name: "shout", description: "Say it louder.", inputSchema: JSON.stringify(object) },
      { name: "explode", description: "Throws an error.", inputSchema: JSON.stringify(object) },
    ];
  },
  call(name, args) {
    const { text } = JSON.parse(args);
    if (name === "shout") {
      if (text === "") {
        // A thrown `tool-error` variant is the tool's own error.
        throw { tag: "invalid-arguments", val: "text is empty" };
      }
      return text.toUpperCase();
    }
    if (name === "explode") {
      throw new Error(text);
    }
    throw { tag: "failed", val: `no tool ${name}` };
  },
};
