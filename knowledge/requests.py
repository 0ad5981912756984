"""Whether a message asks the documents at all.

"Draft an email to my team about Friday's offsite" is a writing task: given three passages of
the handbook, a small model wrote about hotel caps and the product added "not found in the
documents". A message that asks for writing, translating, summarising or brainstorming is
answered without passages, unless it names the documents or their rules ("summarise the
leave policy", "according to the handbook", "总结一下年假规定").

Pure functions: no database, no model.
"""

from __future__ import annotations

import re

_POLITE = r"(?:please\s+|pls\s+|kindly\s+|can you\s+|could you\s+|would you\s+|help me\s+)*"
_TASK_VERBS = (
    r"draft|write|compose|rewrite|rephrase|reword|paraphrase|proofread|polish|shorten|"
    r"translate|summari[sz]e|outline|brainstorm|generate|create|make up|suggest|list some|"
    r"give me (?:some|a few|three|five|ten) (?:ideas|tips|names|examples)|"
    r"explain (?:the concept|what|how) |fix (?:this|the|my) |correct (?:this|the|my) |"
    r"tell me a joke|format"
)
_TASK = re.compile(rf"^\s*{_POLITE}(?:{_TASK_VERBS})\b", re.IGNORECASE)
# "把这句话翻译成英文", "帮我给新同事写一段欢迎词": the object may come before the verb.
_TASK_ZH = re.compile(
    r"^\s*(?:请|麻烦|帮我|请帮我|帮忙)*\s*(?:把[^，。？！?!]{0,30}?|给[^，。？！?!]{0,12}?)?"
    r"(?:写|起草|撰写|草拟|翻译|译成|总结|概括|润色|改写|"
    r"重写|缩写|扩写|生成|列出几个|想几个|给我讲个笑话)"
)
# The request points at the documents: it is grounded whatever its verb.
_DOCUMENTS = re.compile(
    r"\b(?:policy|policies|handbook|guidelines?|regulations?|documents?|manual|procedures?|"
    r"our rules|the rules|company rules)\b|规定|制度|手册|政策|文档|守则|条例|流程",
    re.IGNORECASE,
)


def is_task(message: str) -> bool:
    """Whether `message` asks for writing or general work, not for what the documents say."""
    text = message.strip()
    if not text or _DOCUMENTS.search(text):
        return False
    first_line = text.splitlines()[0]
    return bool(_TASK.search(first_line) or _TASK_ZH.search(first_line))
