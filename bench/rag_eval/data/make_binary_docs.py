"""Regenerate the evaluation corpus's binary documents and the hostile files in bad/.

    python3.11 -m venv /tmp/evalgen
    /tmp/evalgen/bin/pip install python-docx==1.2.0 fpdf2==2.8.9 pypdf==7.1.1
    /tmp/evalgen/bin/python bench/rag_eval/data/make_binary_docs.py

Writes, next to this file:

- acme/leave-policy.docx and acme/remote-work.docx (python-docx, real "Heading 1"/"Heading 2"
  paragraph styles, tables);
- acme/expenses.pdf (fpdf2, real text in the core Helvetica font, "Page N of M" footers);
- bad/: a truncated PDF, a password-protected PDF (pypdf, RC4-128), a DOCX whose
  word/document.xml inflates to 1.2 GB (a zip bomb, about 1.2 MB on disk), a PNG named .pdf, plain
  text named .docx, an empty file and random bytes named .txt.

The dependencies belong to this generator only, not to qassist: they are imported at run time so
that the project's type check does not need them. Tests never run this script; they read the
committed files. The text documents (Markdown, HTML, the GB18030 office guide) are written by hand.
"""

from __future__ import annotations

import datetime as dt
import importlib
import io
import random
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ACME = HERE / "acme"
BAD = HERE / "bad"
FIXED_DATE = dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)

# A document is a list of blocks: (kind, payload). Kinds: "title", "h1", "h2", "p", "ol", "ul",
# "table" (payload: a list of rows, the first one the header).
Block = tuple[str, Any]

LEAVE_POLICY: list[Block] = [
    ("title", "Northwind Robotics Leave Policy"),
    (
        "p",
        "Owner: HR Operations. Version 5.0, effective 1 January 2025. Applies to employees of "
        "Northwind Robotics GmbH (Munich) and Northwind Robotics B.V. (Eindhoven). Employees of "
        "Northwind Robotics (Shanghai) Co., Ltd. are covered by the local leave rules of the "
        "Shanghai entity, which are published separately by the Shanghai HR department.",
    ),
    ("h1", "1. Purpose"),
    (
        "p",
        "Rest is part of doing good work. This policy explains how much paid leave you have, how "
        "sickness, parental and special leave work, which days are public holidays, and how to "
        "request time off in PeopleHub. Where statutory law gives you more, the law applies.",
    ),
    ("h1", "2. Annual leave"),
    ("h2", "2.1 Entitlement by length of service"),
    (
        "p",
        "Annual leave is counted in working days for a five-day working week. Length of service is "
        "measured on 1 January of the leave year, counting full years since your start date.",
    ),
    (
        "table",
        [
            ["Completed years of service", "Annual leave (working days)"],
            ["0 to 2 years", "27 days"],
            ["3 to 5 years", "28 days"],
            ["6 to 9 years", "29 days"],
            ["10 years or more", "30 days"],
        ],
    ),
    (
        "p",
        "Part-time employees receive leave in proportion to their working days per week (for "
        "example, an employee working four days a week with 3 to 5 years of service receives "
        "28 x 4 / 5 = 22.4, rounded up to 22.5 days). In the year you join or leave, you receive "
        "one twelfth of the annual entitlement for each full month of employment.",
    ),
    ("h2", "2.2 Carrying over unused leave"),
    (
        "ol",
        [
            "You may carry over up to 5 days of unused annual leave into the next calendar year.",
            "Carried-over days must be taken by 31 March of the following year; days not taken by "
            "then are forfeited.",
            "Days that you could not take because of illness or parental leave are not forfeited "
            "on "
            "31 March; they remain available for 15 months after the end of the leave year.",
            "Leave cannot be paid out instead of being taken, except when you leave the company.",
        ],
    ),
    ("h2", "2.3 Planning your leave"),
    (
        "ul",
        [
            "Plan at least one block of 10 consecutive working days per year, so that you really "
            "recover.",
            "Teams publish a holiday plan for July and August by 31 March each year.",
            "Field service and customer-support teams: leave between 1 and 15 December needs the "
            "approval of the department head, because most customer installations are completed "
            "before the end of the year.",
        ],
    ),
    ("h1", "3. Sick leave"),
    ("h2", "3.1 Reporting sickness"),
    (
        "ol",
        [
            "Tell your manager and record the absence in PeopleHub (Time off > Sickness) before "
            "10:00 on the first day of sickness.",
            "If the sickness lasts more than 2 calendar days, a medical certificate is required "
            "from "
            "the 3rd calendar day. In Germany the doctor sends it electronically (eAU); you only "
            "need "
            "to confirm in PeopleHub that you saw a doctor.",
            "If you fall sick during annual leave, the days covered by a medical certificate are "
            "credited back to your leave balance.",
        ],
    ),
    ("h2", "3.2 Pay during sickness"),
    (
        "p",
        "You receive your full salary for up to 6 weeks per illness. After that, Northwind "
        "Robotics "
        "tops up the statutory sickness benefit to 90% of your net salary for up to 12 further "
        "weeks, provided you have completed your probation period.",
    ),
    ("h2", "3.3 Children's sickness"),
    (
        "p",
        "When a child under 12 is sick and needs care at home, Northwind Robotics pays your full "
        "salary for up to 5 working days per child per calendar year (at most 12 days per family "
        "and year). A doctor's note for the child is required from the second day.",
    ),
    ("h1", "4. Parental leave"),
    ("h2", "4.1 Statutory parental leave"),
    (
        "p",
        "Every parent may take unpaid parental leave (Elternzeit in Germany, ouderschapsverlof in "
        "the Netherlands) as provided by law. In Germany, parental leave before the child's third "
        "birthday must be requested in writing at least 7 weeks before it starts; use the "
        "PeopleHub form 'Parental leave', which HR confirms within 10 working days.",
    ),
    ("h2", "4.2 Northwind parental top-up"),
    (
        "ul",
        [
            "Employees with at least 12 months of service receive a top-up to 80% of their net "
            "salary for the first 12 weeks of parental leave, on top of the statutory parental "
            "allowance.",
            "Partner leave: the non-birthing parent receives 10 working days of fully paid leave, "
            "to be taken within 8 weeks after the birth or adoption.",
            "Returning parents may work 50% of their hours at full pay during the first 2 weeks "
            "after their return (phased return).",
        ],
    ),
    ("h1", "5. Public holidays and company days"),
    (
        "p",
        "The Munich office follows the public holidays of Bavaria (including Assumption Day, as "
        "Munich has a Catholic majority). Eindhoven follows the Dutch holidays listed in "
        "PeopleHub. "
        "In addition, Northwind Robotics closes all its European offices on three company days. "
        "Public holidays and company days in Munich in 2025:",
    ),
    (
        "table",
        [
            ["Date (2025)", "Holiday"],
            ["Wednesday 1 January", "New Year's Day"],
            ["Monday 6 January", "Epiphany"],
            ["Friday 18 April", "Good Friday"],
            ["Monday 21 April", "Easter Monday"],
            ["Thursday 1 May", "Labour Day"],
            ["Thursday 29 May", "Ascension Day"],
            ["Monday 9 June", "Whit Monday"],
            ["Thursday 19 June", "Corpus Christi"],
            ["Friday 20 June", "Founders' Day (company day)"],
            ["Friday 15 August", "Assumption Day"],
            ["Friday 3 October", "Day of German Unity"],
            ["Wednesday 24 December", "Christmas Eve (company day)"],
            ["Thursday 25 December", "Christmas Day"],
            ["Friday 26 December", "Second Day of Christmas"],
            ["Wednesday 31 December", "New Year's Eve (company day)"],
        ],
    ),
    (
        "p",
        "Founders' Day is always the Friday after Corpus Christi and celebrates the founding of "
        "Northwind Robotics in June 2011. Employees who must work on a company day (for example "
        "on-call engineers) receive a replacement day to be taken within 3 months.",
    ),
    ("h1", "6. Special leave"),
    (
        "p",
        "Paid special leave is granted for the following events and is not deducted from annual "
        "leave:",
    ),
    (
        "table",
        [
            ["Event", "Paid days"],
            ["Your own wedding or registered partnership", "2 days"],
            ["Death of a spouse, partner, child or parent", "3 days"],
            ["Death of a sibling, grandparent or parent-in-law", "1 day"],
            ["Moving house at the company's request", "2 days"],
            ["Private house move (once per calendar year)", "1 day"],
            ["Volunteer firefighter or rescue service call-out", "as long as the call-out lasts"],
        ],
    ),
    ("h2", "6.1 Sabbatical"),
    (
        "p",
        "After 5 years of service you may take an unpaid sabbatical of 1 to 3 months. Request it "
        "at "
        "least 3 months before it starts; it needs the approval of your department head. Your job "
        "and your benefits continue; pension contributions pause during the sabbatical.",
    ),
    ("h1", "7. How to request leave"),
    (
        "ol",
        [
            "Open PeopleHub (peoplehub.nwrobotics.example) and choose Time off > New request.",
            "Requests for 10 or more consecutive working days must be submitted at least 6 weeks "
            "in "
            "advance; shorter requests at least 5 working days in advance.",
            "Your manager decides within 3 working days. Requests without a decision after 3 "
            "working "
            "days are escalated automatically to HR Operations.",
            "Approved absences appear in your team's calendar in Outlook; set an out-of-office "
            "reply "
            "naming your stand-in.",
            "Cancelling approved leave: cancel the request in PeopleHub; if the company asks you "
            "to "
            "cancel, it reimburses the cancellation costs of your booked holiday.",
        ],
    ),
    (
        "p",
        "Questions: HR Operations, hr@nwrobotics.example, extension 2150 (Munich) or the HR desk "
        "on "
        "the first floor of Building B, Monday to Thursday 09:00-16:00.",
    ),
]

REMOTE_WORK: list[Block] = [
    ("title", "Northwind Robotics Remote Work Policy"),
    (
        "p",
        "Owner: People team. Version 2.3, effective 1 April 2024. Applies to employees of the "
        "Munich "
        "headquarters and the Eindhoven engineering site. The Shanghai office has its own "
        "arrangement, agreed with the local works representatives.",
    ),
    ("h1", "1. Our hybrid model"),
    (
        "p",
        "We build physical products, and some things only happen when people are in the same room "
        "with a robot. Focused work often goes better at home. Our hybrid model combines both: you "
        "decide with your manager which days you work remotely, within the limits below.",
    ),
    ("h2", "1.1 Remote days per week"),
    (
        "ul",
        [
            "Up to 3 remote days per week for full-time employees; at least 2 days per week are "
            "spent in the office.",
            "Tuesday and Thursday are anchor days: team meetings, demos and reviews happen on "
            "these "
            "days, and everyone who can is in the office.",
            "Roles that need hardware on site (lab technicians, assembly, logistics, reception) "
            "may "
            "work remotely at most 1 day per week.",
            "Remote days cannot be saved up and used in later weeks.",
        ],
    ),
    ("h2", "1.2 Core hours"),
    (
        "p",
        "Core hours are the times when everyone is available for meetings and calls, wherever they "
        "work. Outside them you organise your working time yourself, within the working-time law.",
    ),
    (
        "table",
        [
            ["Day", "Core hours (local office time)"],
            ["Monday to Thursday", "10:00-15:00"],
            ["Friday", "10:00-13:00"],
        ],
    ),
    (
        "p",
        "Record your working time in PeopleHub. Nobody is expected to read or answer messages "
        "after "
        "19:00 or at weekends, except colleagues on the on-call rota.",
    ),
    ("h1", "2. Equipment and allowances"),
    ("h2", "2.1 Equipment provided by the company"),
    (
        "p",
        "On request through the IT portal, the company lends you for your home office: a 27-inch "
        "monitor, a docking station, a keyboard and a mouse. They remain company property and are "
        "returned when you leave; IT collects them by courier at no cost to you.",
    ),
    ("h2", "2.2 Home-office stipend"),
    (
        "ol",
        [
            "A one-time home-office stipend of EUR 600 for furniture and lighting (for example a "
            "desk chair, a desk or a lamp).",
            "Claim it through Ledgerline, with receipts, within the first 6 months of your "
            "employment (or of this policy applying to you).",
            "The stipend is renewed once every 4 years: after 4 years you can claim another EUR "
            "600.",
            "Items bought with the stipend are yours to keep.",
        ],
    ),
    ("h2", "2.3 Monthly internet allowance"),
    (
        "p",
        "Employees who work remotely at least one day a week receive an internet and electricity "
        "allowance of EUR 25 per month, paid with the salary. It is taxable and appears on the "
        "payslip as 'Remote allowance'.",
    ),
    ("h2", "2.4 Coworking spaces"),
    (
        "p",
        "If your home is not suitable for work, your manager can approve a coworking membership of "
        "up to EUR 150 per month. The membership counts as a remote day, not as an office day.",
    ),
    ("h1", "3. Working from abroad"),
    (
        "p",
        "Working from another country, even for a few days, can create tax and social-security "
        "obligations for you and for the company. The following rules therefore apply:",
    ),
    (
        "ol",
        [
            "You may work from abroad for up to 20 working days per calendar year, in blocks of at "
            "most 10 consecutive working days.",
            "Allowed countries: member states of the European Union, the EEA (Iceland, "
            "Liechtenstein, Norway) and Switzerland.",
            "Working from any other country is not allowed, except in rare cases approved in "
            "writing by both HR and the Tax department.",
            "Request it at least 4 weeks in advance with the PeopleHub form 'Work from abroad'. HR "
            "applies for the A1 certificate for social security, which you must carry with you.",
            "Never work from a country on the high-risk list of the Travel Policy.",
            "Core hours stay in the time of your home office.",
        ],
    ),
    (
        "p",
        "Working from abroad is not a business trip: travel and accommodation costs are your own, "
        "and no per diem is paid.",
    ),
    ("h1", "4. Security when working remotely"),
    (
        "ul",
        [
            "Connect through the company VPN (FortiClient) before using internal systems, and "
            "always on public, hotel or train Wi-Fi.",
            "Make calls about confidential topics where nobody can listen; in public places use a "
            "privacy filter on the screen (IT provides one on request).",
            "Company laptops are for your use only, not for family members.",
            "Print confidential documents only in the office.",
            "Report a lost or stolen device to the IT helpdesk within 1 hour.",
        ],
    ),
    ("h1", "5. Health, safety and insurance"),
    (
        "p",
        "Set up your workstation following the ergonomics checklist on the Northwind Wiki; the "
        "company's occupational health service offers a free video consultation. Accidents while "
        "working on company tasks at home are covered by the statutory accident insurance in "
        "Germany; report any accident to HR Operations within 3 days.",
    ),
    ("h1", "6. Full-time remote work"),
    (
        "ul",
        [
            "Temporary full-time remote work (for example for family care) is possible for up to 3 "
            "months with the approval of your department head.",
            "Permanent full-time remote work needs the approval of your vice president and HR, and "
            "a change to your employment contract.",
            "Commuting costs to the office are not reimbursed for hybrid or remote employees.",
        ],
    ),
    (
        "p",
        "Questions: People team, people@nwrobotics.example, extension 2100.",
    ),
]

EXPENSES: list[Block] = [
    ("title", "Northwind Robotics Expenses Policy"),
    (
        "p",
        "Owner: Finance - Travel & Expenses team. Version 6.1, effective 1 March 2024. Applies to "
        "all employees of Northwind Robotics GmbH, Northwind Robotics B.V. and Northwind Robotics "
        "(Shanghai) Co., Ltd. Amounts are in euros (EUR); employees of the Shanghai entity claim "
        "the equivalent amount in yuan (CNY) at the monthly rate published by Finance.",
    ),
    ("h1", "1. Principles"),
    (
        "p",
        "Northwind Robotics reimburses the reasonable costs that you incur on company business. "
        "Spend the company's money as carefully as your own; if in doubt, ask before you spend. "
        "Travel costs (flights, hotels, per diems, mileage) follow the Travel Policy; this policy "
        "repeats its limits where they matter for your expense report.",
    ),
    ("h1", "2. Submitting an expense report"),
    (
        "ol",
        [
            "Claim all expenses in Ledgerline (expenses.nwrobotics.example), on the web or with "
            "the "
            "Ledgerline mobile app.",
            "Submit your report within 30 days of the expense, or for a trip within 30 days after "
            "your return.",
            "Reports submitted more than 90 days after the expense are not reimbursed.",
            "Attach an itemised receipt for every expense above EUR 25. For smaller amounts a "
            "short "
            "description is enough.",
            "A photo of the receipt in the app is enough; keep paper originals for 3 months after "
            "the report has been paid, because Finance audits a sample of reports.",
            "Lost receipts: fill in the 'Missing receipt declaration' in Ledgerline. It is "
            "accepted "
            "for amounts up to EUR 100 and at most twice per calendar year.",
        ],
    ),
    ("h1", "3. Reimbursement limits"),
    (
        "table",
        [
            ["Expense", "Limit"],
            ["Hotel per night, Class A city (e.g. London, Tokyo, Shanghai)", "EUR 210"],
            ["Hotel per night, Class B city (e.g. Munich, Amsterdam)", "EUR 155"],
            ["Hotel per night, Class C city", "EUR 115"],
            ["Per diem, full day (Class A / B / C)", "EUR 62 / 48 / 39"],
            ["Private car mileage", "EUR 0.32 per km"],
            ["Business meal with customers or partners", "EUR 75 per person, drinks included"],
            ["Internal team meal (max. 4 per team and year)", "EUR 40 per person"],
            ["Taxi or ride-hailing, without justification", "EUR 60 per ride"],
            ["Mobile phone contract, if you have no company phone", "EUR 45 per month"],
            ["Professional books and subscriptions", "EUR 300 per calendar year"],
            ["Gifts to business partners", "EUR 40 per recipient and year"],
            ["Tips (restaurants, taxis)", "10% of the bill"],
        ],
    ),
    ("h2", "3.1 Business meals"),
    (
        "p",
        "Business meals with customers, suppliers or partners need a business purpose and the "
        "names "
        "and companies of all participants in the report. The most senior Northwind employee "
        "present "
        "pays and claims the meal. The EUR 75 limit per person includes drinks, tax and tip. "
        "Alcohol is reimbursed only as part of a meal and within this limit.",
    ),
    ("h2", "3.2 Conferences and training"),
    (
        "p",
        "Conference fees and external training need the approval of your manager before you "
        "register, through a pre-approval request in Ledgerline. Registration fees above EUR 1,000 "
        "also need the approval of your department head.",
    ),
    ("h2", "3.3 Home office"),
    (
        "p",
        "Furniture and equipment for your home office are covered by the one-time home-office "
        "stipend of the Remote Work Policy (EUR 600), claimed as a separate expense type in "
        "Ledgerline. Other home-office costs are not reimbursed as expenses.",
    ),
    ("h1", "4. What is not reimbursable"),
    (
        "p",
        "The following are never reimbursed, even when incurred during a business trip:",
    ),
    (
        "ol",
        [
            "Minibar items, in-room films and pay-TV.",
            "Traffic and parking fines, towing charges and penalties of any kind.",
            "Upgrades to a higher class of travel or room that the policy does not allow.",
            "Airline lounge memberships and annual fees of loyalty programmes.",
            "Personal items: clothing, toiletries, hairdresser, gym or spa.",
            "Childcare, pet care and house-sitting while you travel.",
            "Costs of travelling companions, family or friends.",
            "Gifts, invitations or payments to public officials, of any value.",
            "Interest and late fees on the corporate card caused by late reconciliation.",
            "Fuel for rental cars charged by the rental company (full-to-full refuelling instead).",
        ],
    ),
    ("h1", "5. Corporate card"),
    (
        "p",
        "Employees who travel on business more than 4 times a year receive a personal Northwind "
        "corporate Visa card issued by Hanseatic Commerce Bank. Request it from Finance with your "
        "manager's approval; the card arrives within about 10 working days.",
    ),
    (
        "table",
        [
            ["Card rule", "Value"],
            ["Standard monthly limit", "EUR 4,000"],
            ["Monthly limit for sales directors and field service leads", "EUR 10,000"],
            ["Cash withdrawals", "at most EUR 300 per month, business use only"],
            ["Fee on cash withdrawals", "2%, reimbursed for business withdrawals"],
            ["Reconciliation in Ledgerline", "by the 7th working day of the following month"],
        ],
    ),
    (
        "ul",
        [
            "The card is for business expenses only. Private charges made by mistake must be "
            "marked as private in Ledgerline and are deducted from your next salary payment.",
            "Lost or stolen card: block it at once through the bank's 24-hour hotline "
            "+49 69 5050 7712, then inform Finance at expenses@nwrobotics.example within 24 hours.",
            "Hotel bills and flights are charged to the card; per diems are never paid to the "
            "card.",
            "The card is cancelled on your last working day; any balance is settled with your "
            "final "
            "salary.",
        ],
    ),
    ("h1", "6. Approval chain"),
    (
        "p",
        "Every expense report is approved in Ledgerline by the following people, in this order. "
        "The thresholds apply to the total of the report and are the same as for travel requests.",
    ),
    (
        "table",
        [
            ["Report total", "Approvers"],
            ["up to EUR 1,500", "Line manager"],
            ["EUR 1,500.01 to EUR 5,000", "Line manager, then department head"],
            ["above EUR 5,000", "Line manager, department head, then the CFO"],
        ],
    ),
    (
        "ul",
        [
            "Nobody approves their own expenses or those of their own manager; the CFO's reports "
            "are "
            "approved by the Chief Executive Officer.",
            "Approvers have 5 working days to approve or return a report. After 10 working days "
            "without a decision, the report is escalated to the next approver.",
            "After approval, Finance Controlling checks the receipts of a random sample of 10% of "
            "all reports, and of every report above EUR 5,000.",
        ],
    ),
    ("h1", "7. Payment timeline"),
    (
        "ol",
        [
            "Approved reports are paid by SEPA bank transfer in the weekly payment run every "
            "Thursday.",
            "Reports fully approved by Tuesday 12:00 CET are paid in that week's Thursday run; "
            "later approvals go into the following week's run.",
            "Employees of the Shanghai entity are reimbursed in CNY with the next monthly salary "
            "payment.",
            "Travel advances of up to EUR 800 can be requested in Ledgerline at least 10 working "
            "days before departure; they are settled with the expense report for the trip.",
        ],
    ),
    ("h1", "8. Foreign currencies"),
    (
        "p",
        "Card payments are converted at the rate shown on the card statement. Cash expenses in "
        "foreign currency are converted at the rate on your exchange receipt, or, without one, at "
        "the European Central Bank reference rate of the day of the expense. Ledgerline does this "
        "automatically when you enter the currency.",
    ),
    ("h1", "9. Contacts"),
    (
        "p",
        "Travel & Expenses team: expenses@nwrobotics.example, extension 2270 (Munich), Monday to "
        "Friday 09:00-16:00 CET. Travel bookings: Travel Desk, extension 2250.",
    ),
]


def build_docx(blocks: list[Block], path: Path, *, title: str, author: str) -> None:
    docx = importlib.import_module("docx")
    document = docx.Document()
    props = document.core_properties
    props.title, props.author, props.last_modified_by = title, author, author
    props.created = props.modified = FIXED_DATE.replace(tzinfo=None)
    for kind, payload in blocks:
        if kind == "title":
            document.add_heading(payload, level=0)
        elif kind in ("h1", "h2"):
            document.add_heading(payload, level=int(kind[1]))
        elif kind == "p":
            document.add_paragraph(payload)
        elif kind in ("ol", "ul"):
            style = "List Number" if kind == "ol" else "List Bullet"
            for item in payload:
                document.add_paragraph(item, style=style)
        elif kind == "table":
            table = document.add_table(rows=len(payload), cols=len(payload[0]))
            table.style = "Light Grid Accent 1"
            for r, row in enumerate(payload):
                for c, text in enumerate(row):
                    table.cell(r, c).text = text
        else:
            raise ValueError(kind)
    document.save(str(path))


def build_pdf(blocks: list[Block], path: Path) -> None:
    fpdf = importlib.import_module("fpdf")
    pdf = fpdf.FPDF(format="A4")
    pdf.set_title("Northwind Robotics Expenses Policy")
    pdf.set_author("Northwind Robotics Finance")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_auto_page_break(auto=True, margin=20)
    pdf.set_margins(22, 20, 22)

    def footer() -> None:
        pdf.set_y(-14)
        pdf.set_font("Helvetica", "", 8)
        pdf.cell(0, 8, "Northwind Robotics - Expenses Policy v6.1", align="L")
        pdf.set_x(pdf.l_margin)
        pdf.cell(0, 8, f"Page {pdf.page_no()} of {{nb}}", align="R")

    pdf.footer = footer  # fpdf2 calls self.footer() at each page end
    pdf.add_page()
    for kind, payload in blocks:
        if kind == "title":
            pdf.set_font("Helvetica", "B", 18)
            pdf.multi_cell(0, 10, payload, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
        elif kind in ("h1", "h2"):
            pdf.ln(3)
            pdf.set_font("Helvetica", "B", 14 if kind == "h1" else 12)
            pdf.multi_cell(0, 7, payload, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1)
        elif kind == "p":
            pdf.set_font("Helvetica", "", 10.5)
            pdf.multi_cell(0, 5.5, payload, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
        elif kind in ("ol", "ul"):
            pdf.set_font("Helvetica", "", 10.5)
            for n, item in enumerate(payload, start=1):
                mark = f"{n}." if kind == "ol" else "-"
                pdf.set_x(pdf.l_margin + 4)
                pdf.multi_cell(0, 5.5, f"{mark} {item}", new_x="LMARGIN", new_y="NEXT")
                pdf.ln(1)
            pdf.ln(1)
        elif kind == "table":
            pdf.set_font("Helvetica", "", 10)
            with pdf.table(col_widths=(60, 40), line_height=6) as table:
                for row in payload:
                    cells = table.row()
                    for text in row:
                        cells.cell(text)
            pdf.ln(3)
        else:
            raise ValueError(kind)
    pdf.output(str(path))


# --- bad/: hostile inputs for the upload and indexing paths (issue #18, section 6) ---

BOMB_SIZE = 1152 * 1024 * 1024  # 1.2 GB of word/document.xml, above 1 GiB
CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
)
DOC_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>"
)
DOC_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"


def build_zip_bomb(path: Path) -> None:
    """A well-formed DOCX whose one paragraph is 1.2 GB of 'A': only a size limit stops it."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("[Content_Types].xml", CONTENT_TYPES)
        zf.writestr("_rels/.rels", RELS)
        block = b"A" * (1024 * 1024)
        body = BOMB_SIZE - len(DOC_HEAD) - len(DOC_TAIL)
        with zf.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(DOC_HEAD)
            for _ in range(body // len(block)):
                member.write(block)
            member.write(b"A" * (body % len(block)))
            member.write(DOC_TAIL)


def tiny_png() -> bytes:
    """An 8x8 grey PNG, built by hand (no imaging library)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0)  # 8x8, 8-bit greyscale
    pixels = b"".join(b"\x00" + bytes([0x80] * 8) for _ in range(8))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixels))
        + chunk(b"IEND", b"")
    )


def build_encrypted_pdf(path: Path) -> None:
    fpdf = importlib.import_module("fpdf")
    pypdf = importlib.import_module("pypdf")
    pdf = fpdf.FPDF(format="A4")
    pdf.set_creation_date(FIXED_DATE)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 12)
    pdf.multi_cell(
        0,
        6,
        "Northwind Robotics - salary bands 2025 (restricted). This file is password protected; "
        "an indexer must report it as encrypted instead of indexing it.",
    )
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(bytes(pdf.output()))))
    writer.encrypt(
        user_password="nwr-eval-user",  # noqa: S106 - a published test password, nothing secret
        owner_password="nwr-eval-owner",  # noqa: S106
        algorithm="RC4-128",
    )
    with path.open("wb") as out:
        writer.write(out)


def build_bad(expenses_pdf: Path) -> None:
    BAD.mkdir(exist_ok=True)
    data = expenses_pdf.read_bytes()
    # A download cut short: the first 30% of a real PDF, without its page tree, xref and trailer.
    (BAD / "corrupt-truncated.pdf").write_bytes(data[: len(data) * 3 // 10])
    build_encrypted_pdf(BAD / "encrypted.pdf")
    build_zip_bomb(BAD / "zip-bomb.docx")
    (BAD / "png-named.pdf").write_bytes(tiny_png())
    (BAD / "text-named.docx").write_text(
        "This is plain text saved with a .docx extension. It is not a ZIP archive, so a DOCX "
        "parser must reject it with a clear reason.\n",
        encoding="utf-8",
    )
    (BAD / "empty.txt").write_bytes(b"")
    (BAD / "junk.txt").write_bytes(random.Random(18).randbytes(64 * 1024))


def main() -> None:
    build_docx(
        LEAVE_POLICY,
        ACME / "leave-policy.docx",
        title="Northwind Robotics Leave Policy",
        author="Northwind Robotics HR Operations",
    )
    build_docx(
        REMOTE_WORK,
        ACME / "remote-work.docx",
        title="Northwind Robotics Remote Work Policy",
        author="Northwind Robotics People team",
    )
    build_pdf(EXPENSES, ACME / "expenses.pdf")
    build_bad(ACME / "expenses.pdf")
    for path in sorted([*ACME.glob("*.docx"), *ACME.glob("*.pdf"), *BAD.iterdir()]):
        print(f"{path.relative_to(HERE)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
