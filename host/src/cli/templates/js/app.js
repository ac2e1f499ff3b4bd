// {{name}}: a toolhost plugin (the toolhost:plugin@0.1.0 world, in wit/). `describe` lists
// the tools, `call` runs one; the arguments already passed the tool's schema. Throw
// { tag: "failed", val: "..." } (or "invalid-arguments") for the tool's own error.

const schema = {
  type: "object",
  required: ["name"],
  additionalProperties: false,
  properties: { name: { type: "string", minLength: 1 } },
};

export const tool = {
  describe() {
    return [{ name: "{{tool}}", description: "Greet someone by name.", inputSchema: JSON.stringify(schema) }];
  },
  call(name, args) {
    const parsed = JSON.parse(args);
    if (name === "{{tool}}") {
      return `Hello, ${parsed.name}!`;
    }
    throw { tag: "failed", val: `no tool ${name}` };
  },
};
