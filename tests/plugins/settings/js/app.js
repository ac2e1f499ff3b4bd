// A typed JavaScript tool (componentize-js) that reads its settings through
// wasi:config/store@0.2.0-draft, as jco's components of other hosts do.
import { get, getAll } from "wasi:config/store@0.2.0-draft";

export const lookup = {
  setting(key) {
    return get(key);
  },
  granted() {
    return getAll().map(([key, value]) => `${key}=${value}`).sort();
  },
};
