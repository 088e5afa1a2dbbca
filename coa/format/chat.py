"""A ChatML chat template for training on CoA data in plain TRL, observations left out of the loss.

TRL's ``SFTConfig(assistant_only_loss=True)`` trains exactly the tokens a chat template wraps in
``{% generation %}`` … ``{% endgeneration %}``. :data:`TRAINING_CHAT_TEMPLATE` renders ChatML
(``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, the layout of the tiny student and of
Qwen2.5 without its default system prompt) and wraps the assistant content in generation blocks
that stop at every ``<observation>`` and resume after its ``</observation>`` and that tag's
newline, then one more block for ``<|im_end|>\\n``. So the trained characters are exactly those
:func:`coa.format.masks.label_chat` trains: the model's own segments and the end of its turn, never
the prompt, never tool output. Splitting on the tags is exact because observations are escaped
(:mod:`coa.format.codec`): the first ``</observation>`` after an ``<observation>`` is its end.

Use it by setting ``tokenizer.chat_template`` to it (or writing it to a ``.jinja`` file and passing
``SFTConfig(chat_template_path=...)``); the ``hf`` export writes it as ``chat_template.jinja``.
"""

from __future__ import annotations

_OBS, _END = "<observation>", "</observation>"

TRAINING_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    f"{{%- set pieces = message['content'].split('{_OBS}') -%}}"
    "{%- if pieces[0] %}{% generation %}{{ pieces[0] }}{% endgeneration %}{% endif -%}"
    "{%- for piece in pieces[1:] -%}"
    f"{{%- set parts = piece.split('{_END}', 1) -%}}"
    "{%- if parts | length == 1 -%}"
    f"{{{{- '{_OBS}' + piece -}}}}"
    "{%- else -%}"
    "{%- set nl = '\\n' if parts[1].startswith('\\n') else '' -%}"
    "{%- set rest = parts[1][nl | length:] -%}"
    f"{{{{- '{_OBS}' + parts[0] + '{_END}' + nl -}}}}"
    "{%- if rest %}{% generation %}{{ rest }}{% endgeneration %}{% endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{% generation %}{{ '<|im_end|>\\n' }}{% endgeneration %}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML with ``{% generation %}`` blocks around the assistant's own text (observations excluded)."""
