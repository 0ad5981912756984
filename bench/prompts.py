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
