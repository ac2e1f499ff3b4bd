// A typed JavaScript tool, built with componentize-js against tests/plugins/greeter/wit: each
// function of the exported interface is a tool whose schema toolhost derives from the WIT.
export const greetings = {
  greet(name, times) {
    if (name === "") {
      // A thrown value is the `err` of the function's result.
      throw "the name is empty";
    }
    const text = Array(times ?? 1).fill(`hello ${name}`).join(" ");
    return { text, length: text.length };
  },
  explode(message) {
    throw new Error(message);
  },
};
