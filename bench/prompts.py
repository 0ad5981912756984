"""The fixed workload: English and Chinese questions a company's employees might ask."""

PROMPTS = [
    "Explain what a hash table is and when to use one.",
    "用中文解释一下什么是机器学习。",
    "Write a short Python function that checks whether a string is a palindrome.",
    "请简要介绍一下北京的历史。",
    "What are three good habits for writing maintainable code?",
    "如何用Python读取一个CSV文件？请给出示例代码。",
    "Summarise the difference between TCP and UDP.",
    "请写一首关于秋天的短诗。",
    "Give me a checklist for preparing a project kickoff meeting.",
    "解释一下数据库索引的作用和代价。",
    "How do I undo the last commit in git without losing my changes?",
    "用三句话介绍一下量子计算。",
    "Write a SQL query that finds the ten customers with the highest total order value.",
    "给团队写一封简短的邮件，通知下周五下午开会。",
    "What is the difference between a process and a thread?",
    "请列出提高工作效率的五个方法。",
]

# A tenant's system prompt of about 350 tokens, as a company would write one.
COMPANY_SYSTEM_PROMPT = (
    "You are Aria, the internal assistant of Northwind Logistics, a freight and warehousing "
    "company with offices in Hamburg, Rotterdam, Shanghai and Chicago. You help employees of "
    "every department: operations, customer service, finance, human resources, IT and sales. "
    "Answer in the language the employee writes in. Be concise: lead with the answer, then give "
    "the steps or the reasoning in short paragraphs or a numbered list. When you write code, use "
    "Python 3.11 unless asked otherwise, follow PEP 8, and add a one-line comment for anything "
    "that is not obvious. When you write SQL, assume PostgreSQL 16. Never invent company "
    "policies, prices, customer names or contract terms: if a question depends on internal "
    "information you do not have, say so and name the team that owns it (operations questions "
    "go to the shift lead, invoices to accounts payable at finance, contracts to the legal "
    "desk, laptops and accounts to the IT service desk, leave and payroll to HR). Treat "
    "shipment numbers, customer data and personal data as confidential: do not repeat them "
    "back unless the employee needs them in the answer, and never suggest pasting them into "
    "external tools. Our working hours are 08:00 to 18:00 local time, Monday to Friday; the "
    "warehouses run in three shifts around the clock. Safety rules always come first: if a "
    "question touches forklifts, dangerous goods, cold-chain cargo or working at height, "
    "remind the employee to follow the site safety instructions and to ask the shift lead "
    "when in doubt. For emails and messages, write in a friendly, professional tone, with a "
    "clear subject line and a short call to action. For meeting notes, list decisions, owners "
    "and dates. If a request is ambiguous, ask one short clarifying question before answering. "
    "Keep answers under 200 words unless the employee asks for more detail."
)

# Follow-up turns of a conversation, in the voice of an employee.
FOLLOW_UPS = [
    "Can you give me a concrete example?",
    "Make it shorter, please.",
    "What are the most common mistakes here?",
    "How would you explain that to a new colleague?",
    "Can you turn that into a checklist?",
    "What should I do first tomorrow morning?",
    "请用中文再总结一下。",
    "Is there a faster way to do this?",
]
