// {{name}}: a toolhost plugin in C (the toolhost:plugin@0.1.0 world, in wit/; build.sh
// writes its bindings into bindings/). `describe` lists the tools, `call` runs one; the
// arguments arrive as compact JSON that already passed the tool's schema. Return false with
// `err` set for the tool's own error.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "plugin.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"required\":[\"name\"],\"additionalProperties\":false,"
    "\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":100}}}";

void exports_toolhost_plugin_tool_describe(exports_toolhost_plugin_tool_list_tool_spec_t *ret) {
    ret->len = 1;
    ret->ptr = calloc(1, sizeof(exports_toolhost_plugin_tool_tool_spec_t));
    plugin_string_dup(&ret->ptr[0].name, "{{tool}}");
    plugin_string_dup(&ret->ptr[0].description, "Greet someone by name.");
    plugin_string_dup(&ret->ptr[0].input_schema, SCHEMA);
}

bool exports_toolhost_plugin_tool_call(plugin_string_t *name, plugin_string_t *arguments,
                                        plugin_string_t *ret,
                                        exports_toolhost_plugin_tool_tool_error_t *err) {
    // The schema allows exactly {"name":"..."}: the name is what follows the key, up to its
    // closing quote (escapes are kept as written).
    const char key[] = "{\"name\":\"";
    size_t start = sizeof key - 1;
    if (name->len != strlen("{{tool}}") || memcmp(name->ptr, "{{tool}}", name->len) != 0
        || arguments->len < start + 2 || memcmp(arguments->ptr, key, start) != 0) {
        err->tag = TOOLHOST_PLUGIN_TYPES_TOOL_ERROR_FAILED;
        plugin_string_dup(&err->val.failed, "no such tool, or arguments it does not take");
        return false;
    }
    size_t end = start;
    while (end < arguments->len && arguments->ptr[end] != '"') {
        end += arguments->ptr[end] == '\\' ? 2 : 1;
    }
    size_t length = end - start;
    char *text = malloc(length + 9);
    memcpy(text, "Hello, ", 7);
    memcpy(text + 7, arguments->ptr + start, length);
    memcpy(text + 7 + length, "!", 2);
    plugin_string_dup(ret, text);
    free(text);
    return true;
}
