#include "engine/tokenizer/jinja/jinja.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::jinja {
namespace {

struct RenderCase {
  const char* name;
  const char* source;
  const char* expected;
};

constexpr char kVariables[] =
    R"json({"d": {"a": 1, "items": [1, 2], "b": {"c": null}, "f": 1.0}, "s": "Hello World", "l": [3, 1, 2], "f": 1.5, "n": null, "t": true, "e": "", "u": "ßtraße é", "messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1.0, "y": [null, true]}}}]}]})json";

// Each template with the output Python jinja2 3.1 gives for it (in
// transformers' environment, with kVariables).
constexpr RenderCase kRenderCases[] = {
    {"Text", "plain text {# gone #}and more", "plain text and more"},
    {"TrimBlocks", "{% if true %}\nyes\n{% endif %}\nafter", "yes\nafter"},
    {"LstripBlocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc",
     "a\n    b\nc"},
    {"LstripOnlyBlocksNotVariables", "a\n    {{ 'v' }}\n  {# c #}\nz",
     "a\n    v\nz"},
    {"LstripNotAfterText", "x  {% if true %}y{% endif %}", "x  y"},
    {"PlusDisablesLstrip", "a\n    {%+ if true %}b{% endif %}", "a\n    b"},
    {"DashStrips",
     "a  \n {{- 'b' -}} \n  c {%- if true -%}  d  {%- endif -%}  e", "abcde"},
    {"CommentDash", "a {#- c -#}  b\n  {# d #}\ne", "ab\ne"},
    {"Raw", "{% raw %}{{ x }} {% if %}{% endraw %}", "{{ x }} {% if %}"},
    {"Crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", "a\nb\n"},
    {"TrailingNewlineDropped", "x\n", "x"},
    {"StringEscapes",
     "{{ 'a\\nb\\t\\\\\\x41\\u00e9\\U0001F600\\101\\q' }}|{{ \"it's\" 'x' }}",
     "a\nb\t\\A\xc3"
     "\xa9"
     "\xf0"
     "\x9f"
     "\x98"
     "\x80"
     "A\\q|it'sx"},
    {"StringWithRealNewline", "{{ 'a\nb' }}", "a\nb"},
    {"Arithmetic",
     "{{ 1/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} "
     "{{ 2**3**2 }} {{ 2**-1 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - "
     "3 }} {{ 1 + 1.0 }} {{ true + 1 }} {{ -f }} {{ 5.0 // 2 }} {{ -1.5 % 1 }}",
     "0.5 3 -4 2 -2 1024 64 0.5 7 9 5 2.0 2 -1.5 2.0 0.5"},
    {"StringAndListOps",
     "{{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 2 }} {{ 2 * [0] }} {{ 'a' ~ 1 "
     "~ none ~ undefined_name ~ 1.0 }} {{ '%s=%d' % ('x', 3) }} {{ "
     "'%.2f|%5s|%-3s|' % (f, 'r', 'l') }}",
     "ab [1, 2] abab [0, 0] a1None1.0 x=3 1.50|    r|l  |"},
    {"FloatRepr",
     "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1e16 }} {{ 1e15 }} "
     "{{ 1.5e300 }} {{ -0.0 }} {{ 1/3 }} {{ 123456789.0 }} {{ f * 2 }}",
     "1.0 0.30000000000000004 1e-05 0.0001 1e+16 1000000000000000.0 1.5e+300 "
     "-0.0 0.3333333333333333 123456789.0 3.0"},
    {"Comparisons",
     "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' "
     "}} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 1 <= 0 }} {{ none == none }} {{ "
     "true == 1 }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}",
     "True True True False True True True False True True True"},
    {"InOperator",
     "{{ 'ell' in s }} {{ 'x' in s }} {{ 'a' in d }} {{ 'zz' not in d }} {{ 1 "
     "in l }} {{ 5 not in l }} {{ 'a' in undefined_name }}",
     "True False True True True True False"},
    {"Logic",
     "{{ t and 'x' }} {{ e or 'y' }} {{ n or l }} {{ not t }} {{ not "
     "undefined_name is defined }} {{ 'a' if t else 'b' }} {{ 'a' if e else "
     "'b' }} [{{ 'a' if e }}] {{ 'a' if 0 else 'b' if '' else 'c' }}",
     "x y [3, 1, 2] False True a b [] c"},
    {"Literals",
     "{{ [1, 'a', none, true, false, 1.5] }} {{ (1,) }} {{ (1, 2) }} {{ () }} "
     "{{ {'k': [1, {'j': none}]} }} {{ True }} {{ None }}",
     "[1, 'a', None, True, False, 1.5] (1,) (1, 2) () {'k': [1, {'j': None}]} "
     "True None"},
    {"PythonStr",
     "{{ d }} {{ ['it\\'s', 'q\"', 'both\\'\"', '\\n\\t\\x00\\u200b'] }} {{ "
     "messages[2] }} {{ u }}",
     "{'a': 1, 'items': [1, 2], 'b': {'c': None}, 'f': 1.0} [\"it's\", 'q\"', "
     "'both\\'\"', '\\n\\t\\x00\\u200b'] {'role': 'assistant', 'content': '', "
     "'tool_calls': [{'function': {'name': 'f', 'arguments': {'x': 1.0, 'y': "
     "[None, True]}}}]} \xc3"
     "\x9f"
     "tra\xc3"
     "\x9f"
     "e \xc3"
     "\xa9"
     ""},
    {"AttributeVsItem",
     "{{ d.a }} {{ d['a'] }} {{ d['items'] }} {{ d.items is defined }} {{ "
     "d.b.c }} {{ d.zz is defined }} {{ d.get('a') }} {{ d.get('zz', 5) }} {{ "
     "d.get('zz') }} {{ l.0 }} {{ messages[-1].role }}",
     "1 1 [1, 2] True None False 1 5 None 3 assistant"},
    {"DictMethods",
     "{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {% for k, "
     "v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "[('a', 1), ('items', [1, 2]), ('b', {'c': None}), ('f', 1.0)] ['a', "
     "'items', 'b', 'f'] [1, [1, 2], {'c': None}, 1.0] a=1;items=[1, "
     "2];b={'c': None};f=1.0;"},
    {"Slicing",
     "{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ "
     "l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-5:10] }} {{ l[10:] }} {{ "
     "u[1:4] }} {{ u[::-1] }} {{ messages[1:]|length }}",
     "H d el dlroW olleH HloWrd [2, 1, 3] [1, 2] [3, 1] [3, 1, 2] [] tra \xc3"
     "\xa9"
     " e\xc3"
     "\x9f"
     "art\xc3"
     "\x9f"
     " 2"},
    {"UndefinedIsLenient",
     "[{{ undefined_name }}] {{ undefined_name is defined }} {{ "
     "undefined_name|length }} {{ undefined_name|default('dv') }} {% for x in "
     "undefined_name %}never{% endfor %} {{ l[5] is defined }} {{ "
     "d.zz|default(0) }}",
     "[] False 0 dv  False 0"},
    {"Tests",
     "{{ n is none }} {{ s is string }} {{ 3 is number }} {{ t is number }} {{ "
     "t is integer }} {{ 3 is integer }} {{ f is float }} {{ t is boolean }} "
     "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ d is mapping }} "
     "{{ l is iterable }} {{ 3 is iterable }} {{ undefined_name is iterable }} "
     "{{ s is sequence }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 "
     "}} {{ 9 is divisibleby(4) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} "
     "{{ 3 is eq 3 }} {{ 3 is equalto 3.0 }} {{ 3 is ne 4 }} {{ 3 is gt 2 }} "
     "{{ 3 is lt 2 }} {{ 3 is ge 3 }} {{ 2 is le 1 }} {{ 'a' is in 'abc' }} {{ "
     "namespace is callable }} {{ n is not none }} {{ none is sameas none }}",
     "True True True True False True True True True False True True True False "
     "True True True True True False True True True True True True False True "
     "False True True False True"},
    {"StringMethods",
     "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hELLO'.capitalize() "
     "}} {{ s.startswith('He') }} {{ s.startswith(('x', 'He')) }} {{ "
     "s.endswith('ld') }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('o') "
     "}} {{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ "
     "'abc'.replace('', '-') }} {{ u.upper() }} {{ 'x'.join(['a', 'b']) }} {{ "
     "'ab'.center(6, '*') }} {{ '7'.zfill(3) }}",
     "HELLO WORLD hello world Hello World Hello True True True 4 7 2 Hell0 "
     "W0rld Hell0 World -a-b-c- SSTRASSE \xc3"
     "\x89"
     " axb **ab** 007"},
    {"SplitAndStrip",
     "{{ s.split() }} {{ s.split('o') }} {{ s.split('o', 1) }} {{ "
     "s.rsplit('o', 1) }} {{ '  a  b  '.split(None, 1) }} {{ '  a  b  "
     "'.rsplit(None, 1) }} {{ 'a,,b'.split(',') }} {{ ''.split() }} {{ "
     "'xxhixx'.strip('x') }} {{ '\\n\\nhi \\n'.lstrip('\\n') }}|{{ 'hi\\n\\n "
     "'.rstrip('\\n') }}|{{ '  hi  '.strip() }}|{{ 'abcba'.strip('ab') }} {{ "
     "'a\\r\\nb\\nc'.splitlines() }}",
     "['Hello', 'World'] ['Hell', ' W', 'rld'] ['Hell', ' World'] ['Hello W', "
     "'rld'] ['a', 'b  '] ['  a', 'b'] ['a', '', 'b'] [] hi hi \n|hi\n\n |hi|c "
     "['a', 'b', 'c']"},
    {"For",
     "{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
     "loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ "
     "loop.cycle('a', 'b') }}|{% endfor %}",
     "1032TrueFalse3a|2121FalseFalse3b|3210FalseTrue3a|"},
    {"ForPrevNext",
     "{% for m in messages %}[{{ loop.previtem.role if loop.previtem is "
     "defined }}/{{ loop.nextitem.role if loop.nextitem }}]{% endfor %}",
     "[/user][system/assistant][user/]"},
    {"ForUnpackFilterElse",
     "{% for k, v in d|items %}{{ k }}{% endfor %} {% for (a, b) in [[1, 2]] "
     "%}{{ a }}{{ b }}{% endfor %} {% for i in l if i > 1 %}{{ i }}/{{ "
     "loop.length }} {% endfor %}{% for i in [] %}x{% else %}empty{% endfor %} "
     "{% for c in u %}{{ c }}.{% endfor %} {% for k in d %}{{ k }}{% endfor %}",
     "aitemsbf 12 3/2 2/2 empty \xc3"
     "\x9f"
     ".t.r.a.\xc3"
     "\x9f"
     ".e. .\xc3"
     "\xa9"
     ". aitemsbf"},
    {"BreakContinue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i "
     "== 5 %}{% break %}{% endif %}{{ i }}{% endfor %}{% for i in range(3) "
     "%}{{ i }}{% break %}{% else %}never{% endfor %}",
     "01340never"},
    {"NestedLoops",
     "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{% endfor "
     "%}{{ loop.index }};{% endfor %}",
     "121;122;"},
    {"SetInForDoesNotLeak",
     "{% set x = 'out' %}{% for i in range(3) %}{% set x = x ~ i %}{{ x }},{% "
     "endfor %}{{ x }}{% for i in range(2) %}{% if i %}[{{ y }}]{% endif %}{% "
     "set y = i %}{% endfor %}",
     "out0,out1,out2,out[]"},
    {"SetInIfLeaks",
     "{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% if messages[0].role == "
     "'system' %}{% set sm = messages[0].content %}{% endif %}{{ sm is defined "
     "}}",
     "5True"},
    {"Namespace",
     "{% set ns = namespace(a=1, b=[]) %}{% for i in range(3) %}{% set ns.a = "
     "ns.a + i %}{% set ns.b = ns.b + [i] %}{% endfor %}{{ ns.a }} {{ ns.b }} "
     "{{ ns.missing is defined }} {{ ns }}",
     "4 [0, 1, 2] False <Namespace {'a': 4, 'b': [0, 1, 2]}>"},
    {"SetForms",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set c = 1, 2 %}{{ c }} {% set blk "
     "%}x{{ s }}{% endset %}{{ blk }} {% set up | upper %}abc{% endset %}{{ up "
     "}}",
     "12 (1, 2) xHello World ABC"},
    {"Macros",
     "{% macro m(a, b=2, c=a) %}{{ a }}-{{ b }}-{{ c }}{% set local = 1 %}{% "
     "endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c=5) }}|{{ m(b=7, a=4) }}|{{ "
     "m() }}|{{ local is defined }}",
     "1-2-1|1-3-1|1-2-5|4-7-4|-2-|False"},
    {"MacroRecursion",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% "
     "endif %}{% endmacro %}{{ fact(6) }}",
     "720"},
    {"MacroVarargsKwargs",
     "{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}",
     "(1, 2){'k': 3}"},
    {"CallBlock",
     "{% macro c() %}<{{ caller() }}>{% endmacro %}{% call c() %}in{% endcall "
     "%}{% macro c2() %}<{{ caller(1, 2) }}>{% endmacro %}{% call(a, b) c2() "
     "%}{{ a + b }}{% endcall %}",
     "<in><3>"},
    {"FilterBlockAndWith",
     "{% filter upper %}up {{ s }}{% endfilter %} {% with a = 1, b = 2 %}{{ a "
     "+ b }}{% endwith %}{{ a is defined }}",
     "UP HELLO WORLD 3False"},
    {"FiltersText",
     "{{ s|upper }} {{ s|lower }} {{ 'hello wORLD-foo(bar'|title }} {{ "
     "u|capitalize }} {{ '  x '|trim }}|{{ 'xxyxx'|trim('x') }} {{ "
     "s|replace('o', '0') }} {{ 'a-b c'|replace('-', '_')|replace(' ', '_') }} "
     "{{ s|length }} {{ u|length }} {{ s|wordcount }} {{ 'ab'|center(7) }}| {{ "
     "5|string ~ 'x' }} {{ '<a>&'|escape }} {{ 'x'|safe }}",
     "HELLO WORLD hello world Hello World-Foo(Bar Sstra\xc3"
     "\x9f"
     "e \xc3"
     "\xa9"
     " x|y Hell0 W0rld a_b_c 11 8 2    ab  | 5x &lt;a&gt;&amp; x"},
    {"FiltersIndent",
     "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ "
     "'a\\n\\nb'|indent(first=true, blank=true) }}|{{ 'a\\nb'|indent('> ') }}",
     "a\n    b\n\n    c|  a\n  b|    a\n    \n    b|a\n> b"},
    {"FiltersLists",
     "{{ l|join(',') }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', "
     "'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ "
     "l|reverse|list }} {{ l|first }} {{ l|last }} {{ l|min }} {{ l|max }} {{ "
     "l|sum }} {{ l|count }} {{ [1, 1, 2, 'a', 'A']|unique|list }} {{ "
     "d|dictsort }} {{ l|batch(2)|list }} {{ 'ab'|list }} {{ d|list }}",
     "3,1,2 [1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] [2, 1, 3] 3 2 "
     "1 3 6 3 [1, 2, 'a'] [('a', 1), ('b', {'c': None}), ('f', 1.0), ('items', "
     "[1, 2])] [[3, 1], [2]] ['a', 'b'] ['a', 'items', 'b', 'f']"},
    {"FiltersSelect",
     "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, none, "
     "'', 2]|select|list }} {{ d.keys()|reject('in', ['a', 'b'])|list }} {{ "
     "messages|selectattr('role', 'equalto', 'user')|list|length }} {{ "
     "messages|rejectattr('tool_calls')|map(attribute='role')|list }} {{ "
     "messages|map(attribute='role')|join('/') }} {{ ['a', "
     "'b']|map('upper')|list }} {{ messages|map(attribute='zz', "
     "default='-')|list }}",
     "[3, 1] [2] [1, 2] ['items', 'f'] 1 ['system', 'user'] "
     "system/user/assistant ['A', 'B'] ['-', '-', '-']"},
    {"FiltersNumbers",
     "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ "
     "3.14159|round(1, 'ceil') }} {{ 7|round }} {{ 1234|round(-2) }} {{ f|int "
     "}} {{ '12'|int + 1 }} {{ '1.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ "
     "'0x1A'|int(0, 16) }} {{ '3.5'|float }} {{ 'ab'|float }} {{ 3|float }}",
     "3 2.0 4.0 2.67 3.2 7 1200 1 13 1 0 5 26 3.5 0.0 3.0"},
    {"FiltersDefault",
     "{{ undefined_name|default('dv') }} {{ e|default('dv') }} {{ "
     "e|default('dv', true) }} {{ n|d('z') }} {{ undefined_name|d }}|",
     "dv  dv None |"},
    {"ToJson",
     "{{ d|tojson }} {{ messages[2]|tojson }} {{ '\xc3"
     "\xa9"
     "\\u2028\\x01\"\\\\'|tojson }} {{ '\xc3"
     "\xa9"
     "'|tojson(ensure_ascii=true) }} {{ d|tojson(sort_keys=true) }} {{ "
     "d|tojson(separators=(',', ':')) }} {{ [1.0, 2.5e-7, 1e300, -0.0]|tojson "
     "}} {{ {1: 'a', none: 'b', true: 'c'}|tojson }}",
     "{\"a\": 1, \"items\": [1, 2], \"b\": {\"c\": null}, \"f\": 1.0} "
     "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
     "[{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.0, \"y\": "
     "[null, true]}}}]} \"\xc3"
     "\xa9"
     "\xe2"
     "\x80"
     "\xa8"
     "\\u0001\\\"\\\\\" \"\\u00e9\" {\"a\": 1, \"b\": {\"c\": null}, \"f\": "
     "1.0, \"items\": [1, 2]} "
     "{\"a\":1,\"items\":[1,2],\"b\":{\"c\":null},\"f\":1.0} [1.0, 2.5e-07, "
     "1e+300, -0.0] {\"1\": \"c\", \"null\": \"b\"}"},
    {"ToJsonIndent",
     "{{ {'a': [1, {'b': 2}], 'c': [], 'd': {}}|tojson(indent=2) }}\n{{ [1, "
     "[2]]|tojson(indent='\\t') }}\n{{ {'a': 1}|tojson(indent=0) }}",
     "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": "
     "[],\n  \"d\": {}\n}\n[\n\t1,\n\t[\n\t\t2\n\t]\n]\n{\n\"a\": 1\n}"},
    {"String",
     "{{ d|string }} {{ none|string }} {{ true|string }} {{ 1.0|string }} {{ "
     "[none, 'x']|string }} {{ "
     "messages[2].tool_calls[0].function.arguments|string }}",
     "{'a': 1, 'items': [1, 2], 'b': {'c': None}, 'f': 1.0} None True 1.0 "
     "[None, 'x'] {'x': 1.0, 'y': [None, True]}"},
    {"Globals",
     "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list "
     "}} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {% set j = joiner('+') "
     "%}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}",
     "[0, 1, 2] [1, 4, 7] [5, 3, 1] {'a': 1, 'b': 'x'} 1 0+1+2"},
    {"PercentAndFormat",
     "{{ '%s and %s' % ('a', 'b') }} {{ '%d items'|format(3) }} {{ '%(a)s' % d "
     "}} {{ '%r' % 'x' }} {{ '%x %o %X %%' % (255, 8, 255) }} {{ "
     "'{}-{}-{0}'.format('a', 'b') if false else '{0}-{1}-{0}'.format('a', "
     "'b') }} {{ '{x}!'.format(x=1) }}",
     "a and b 3 items 1 'x' ff 10 FF % a-b-a 1!"},
};

Variables TestVariables() {
  Variables variables;
  const auto json = nlohmann::ordered_json::parse(kVariables);
  for (const auto& [name, value] : json.items()) {
    variables.emplace_back(name, *Value::FromJson(value));
  }
  return variables;
}

absl::StatusOr<std::string> Render(const std::string& source,
                                   const Variables& variables = {},
                                   const RenderOptions& options = {}) {
  absl::StatusOr<Template> parsed = Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  return parsed->Render(variables, options);
}

// The error of rendering `source`, or "" when it renders.
std::string ErrorOf(const std::string& source,
                    const RenderOptions& options = {},
                    const Variables& variables = {}) {
  absl::StatusOr<std::string> out = Render(source, variables, options);
  return out.ok() ? "" : std::string(out.status().message());
}

TEST(JinjaTest, RendersAsPythonJinja2) {
  const Variables variables = TestVariables();
  for (const RenderCase& c : kRenderCases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::string> out = Render(c.source, variables);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

TEST(JinjaTest, ParseErrorsNameTheLine) {
  EXPECT_EQ(ErrorOf("a\n{{ x |foo }}"),
            "template line 2: unknown filter 'foo'");
  EXPECT_EQ(ErrorOf("{% if x is bar %}{% endif %}"),
            "template line 1: unknown test 'bar'");
  EXPECT_EQ(ErrorOf("\n\n{% if true %}x"),
            "template line 3: unexpected end of template: the 'if' here needs "
            "{% elif %} or {% else %} or {% endif %}");
  EXPECT_EQ(ErrorOf("{% for x in y %}{% endif %}"),
            "template line 1: unknown tag 'endif' (the innermost open block is "
            "'for', closed by 'endfor' or 'else')");
  EXPECT_EQ(ErrorOf("{% include 'x' %}"),
            "template line 1: unknown tag 'include'");
  EXPECT_EQ(
      ErrorOf("{{ 1 2 }}"),
      "template line 1: expected end of print statement '}}', got integer");
  EXPECT_EQ(ErrorOf("{{ 'abc }}"),
            "template line 1: unterminated string literal");
  EXPECT_EQ(
      ErrorOf("{{ x"),
      "template line 1: unexpected end of template: missing '}}' for this tag");
  EXPECT_EQ(ErrorOf("{# never closed"),
            "template line 1: missing end of comment tag");
  EXPECT_EQ(ErrorOf("{% break %}"),
            "template line 1: 'break' outside of a loop");
  EXPECT_EQ(ErrorOf("{{ (1 }}"), "template line 1: unexpected '}'");
  EXPECT_EQ(ErrorOf("{% for x in y recursive %}{% endfor %}"),
            "template line 1: recursive loops are not supported");
}

TEST(JinjaTest, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(ErrorOf("\n{{ x.y }}"), "template line 2: 'x' is undefined");
  EXPECT_EQ(ErrorOf("{{ {}.a.b }}"),
            "template line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(ErrorOf("{{ [][0] + 1 }}"),
            "template line 1: list object has no element 0");
  EXPECT_EQ(ErrorOf("{{ none.x + 1 }}"),
            "template line 1: 'None' has no attribute 'x'");
  EXPECT_EQ(ErrorOf("{{ 'a' + 1 }}"),
            "template line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(ErrorOf("{{ 1 / 0 }}"), "template line 1: division by zero");
  EXPECT_EQ(ErrorOf("{{ 1 < 'a' }}"),
            "template line 1: '<' not supported between instances of 'int' and "
            "'str'");
  EXPECT_EQ(ErrorOf("{% for x in 5 %}{% endfor %}"),
            "template line 1: 'int' object is not iterable");
  EXPECT_EQ(ErrorOf("{{ none|length }}"),
            "template line 1: object of type 'NoneType' has no len()");
  EXPECT_EQ(ErrorOf("{% for a, b in [(1, 2, 3)] %}{% endfor %}"),
            "template line 1: too many values to unpack (expected 2)");
  EXPECT_EQ(ErrorOf("{% macro m(x) %}{% endmacro %}{{ m(1, 2) }}"),
            "template line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(ErrorOf("{% macro m(x) %}{% endmacro %}{{ m(y=1) }}"),
            "template line 1: macro 'm' takes no keyword argument 'y'");
  EXPECT_EQ(ErrorOf("{{ undefined_fn() }}"),
            "template line 1: 'undefined_fn' is undefined");
  EXPECT_EQ(ErrorOf("{{ 'a'() }}"),
            "template line 1: 'str' object is not callable");
  EXPECT_EQ(ErrorOf("{{ 'abc'[::0] }}"),
            "template line 1: slice step cannot be zero");
  EXPECT_EQ(ErrorOf("{{ 1 in 'abc' }}"),
            "template line 1: 'in <string>' requires string as left operand, "
            "not int");
  EXPECT_EQ(
      ErrorOf("{{ x|tojson }}"),
      "template line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(
      ErrorOf("{{ 'x'.join([1]) }}"),
      "template line 1: sequence item 0: expected str instance, int found");
  EXPECT_EQ(ErrorOf("{{ 9223372036854775807 + 1 }}"),
            "template line 1: integer result does not fit in 64 bits");
}

TEST(JinjaTest, SandboxRefusesMutationAndPrivateAttributes) {
  const Variables variables = TestVariables();
  EXPECT_EQ(ErrorOf("{{ messages.append(1) }}", {}, variables),
            "template line 1: access to attribute 'append' of 'list' object is "
            "unsafe.");
  EXPECT_EQ(ErrorOf("{{ d.pop('a') }}", {}, variables),
            "template line 1: access to attribute 'pop' of 'dict' object is "
            "unsafe.");
  EXPECT_EQ(ErrorOf("{{ d.update({}) }}", {}, variables),
            "template line 1: access to attribute 'update' of 'dict' object is "
            "unsafe.");
  EXPECT_EQ(ErrorOf("{{ s.__class__.x }}", {}, variables),
            "template line 1: access to attribute '__class__' of 'str' object "
            "is unsafe.");
  // An unsafe attribute is undefined until used.
  EXPECT_EQ(*Render("{{ l.append is defined }}", variables), "False");
  EXPECT_EQ(ErrorOf("{% set x = {} %}{% set x.a = 1 %}"),
            "template line 1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(ErrorOf("{% set ns = namespace() %}{% set ns.me = [ns] %}"),
            "template line 1: a namespace attribute cannot hold a namespace");
}

TEST(JinjaTest, NativeFunctionsAndRaisedErrors) {
  Variables variables;
  variables.emplace_back(
      "raise_exception",
      MakeNativeFunction("raise_exception", [](const CallArgs& args) {
        return absl::StatusOr<Value>(RaisedError(Str(args.positional[0])));
      }));
  variables.emplace_back("twice",
                         MakeNativeFunction("twice", [](const CallArgs& args) {
                           return absl::StatusOr<Value>(
                               Value::Int(args.positional[0].as_int() * 2));
                         }));
  EXPECT_EQ(*Render("{{ twice(21) }}", variables), "42");
  absl::StatusOr<std::string> out = Render(
      "{% macro m() %}{{ raise_exception('It\\'s ' ~ 1) }}{% endmacro %}\n{{ "
      "m() }}",
      variables);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(IsRaisedError(out.status()));
  EXPECT_EQ(out.status().message(), "It's 1");
}

TEST(JinjaTest, Limits) {
  ParseOptions parse;
  parse.max_source_bytes = 10;
  EXPECT_EQ(
      Template::Parse("01234567890", parse).status().message(),
      "template: the template is 11 bytes, more than max_source_bytes (10)");

  const std::string deep = std::string(500, '(') + "1" + std::string(500, ')');
  EXPECT_TRUE(absl::StrContains(ErrorOf("{{ " + deep + " }}"),
                                "nests deeper than 100 levels"));
  std::string nested_ifs;
  for (int i = 0; i < 200; ++i) nested_ifs += "{% if true %}";
  EXPECT_TRUE(absl::StrContains(ErrorOf(nested_ifs), "nests deeper than 100"));

  RenderOptions small;
  small.max_output_bytes = 100;
  EXPECT_EQ(
      ErrorOf("{% for i in range(1000) %}x{% endfor %}", small),
      "template line 1: the output exceeded max_output_bytes (100 bytes)");
  EXPECT_EQ(
      ErrorOf("{% set ns = namespace(s='x') %}{% for i in range(20) %}"
              "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
              small),
      "template line 1: a string of 128 bytes exceeds max_output_bytes (100)");
  EXPECT_TRUE(absl::StrContains(ErrorOf("{{ 'ab' * 1000 }}", small),
                                "max_output_bytes"));

  RenderOptions few_steps;
  few_steps.max_steps = 1000;
  EXPECT_TRUE(absl::StrContains(
      ErrorOf("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
              "{% endfor %}",
              few_steps),
      "the render took more than max_steps (1000 evaluation steps)"));
  // Lists that double each iteration are charged by their size.
  few_steps.max_steps = 100000;
  EXPECT_TRUE(absl::StrContains(
      ErrorOf("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}"
              "{% set ns.l = ns.l + ns.l %}{% endfor %}",
              few_steps),
      "max_steps"));

  EXPECT_EQ(
      ErrorOf("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
      "template line 1: macro calls nested deeper than max_call_depth (64)");
  RenderOptions shallow;
  shallow.max_depth = 20;
  EXPECT_TRUE(absl::StrContains(
      ErrorOf("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
              shallow),
      "nested deeper than max_depth (20)"));
  EXPECT_TRUE(absl::StrContains(
      ErrorOf("{% set ns = namespace(l=[]) %}{% for i in range(300) %}"
              "{% set ns.l = [ns.l] %}{% endfor %}"),
      "a value nested deeper than 256 levels"));
  EXPECT_EQ(ErrorOf("{{ range(100001) }}"),
            "template line 1: Range too big. The sandbox blocks ranges larger "
            "than MAX_RANGE (100000).");
}

TEST(JinjaTest, JsonInputKeepsOrderAndNumberKinds) {
  const auto json = nlohmann::ordered_json::parse(
      R"({"z": 1, "a": 1.0, "m": [1e5, 2.50, -0, 12345678901234567]})");
  Variables variables = {{"x", *Value::FromJson(json)}};
  EXPECT_EQ(*Render("{{ x }}|{{ x|tojson }}", variables),
            "{'z': 1, 'a': 1.0, 'm': [100000.0, 2.5, 0, 12345678901234567]}|"
            "{\"z\": 1, \"a\": 1.0, \"m\": [100000.0, 2.5, 0, "
            "12345678901234567]}");
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  EXPECT_FALSE(Value::FromJson(nlohmann::ordered_json::parse(deep)).ok());
}

TEST(JinjaTest, PythonFormatting) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(1e-5), "1e-05");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(StringRepr("it's"), "\"it's\"");
  EXPECT_EQ(StringRepr("a'\"b"), "'a\\'\"b'");
  EXPECT_EQ(StringRepr("\x01\n\xc2\x85\xe2\x80\x8b\xc3\xa9"),
            "'\\x01\\n\\x85\\u200b\xc3\xa9'");
  JsonOptions options;
  EXPECT_EQ(*ToJson(Value::String("\xc3\xa9\x7f\x1f"), options),
            "\"\xc3\xa9\x7f\\u001f\"");
  options.ensure_ascii = true;
  EXPECT_EQ(*ToJson(Value::String("\xf0\x9f\x98\x80"), options),
            "\"\\ud83d\\ude00\"");
}

TEST(JinjaTest, RendersFromManyThreads) {
  absl::StatusOr<Template> parsed = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n "
      "+ 1 %}"
      "{{ m.role }}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(parsed.ok());
  const Variables variables = TestVariables();
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) outputs[t] = *parsed->Render(variables);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& out : outputs) EXPECT_EQ(out, "systemuserassistant3");
}

}  // namespace
}  // namespace ringmoe::jinja
