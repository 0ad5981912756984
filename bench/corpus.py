# ruff: noqa: E501 - the handbook's sentences and their fact tables read best one per line
"""A company-sized handbook, generated: Northwind Logistics' documents and the questions its
employees ask about them (bench/capacity.py, issue #35).

    python -m bench.corpus --out /tmp/northwind        # writes the Markdown files, prints a summary

Deterministic (one seed): the same 320 documents, 3,200 or so sections (one passage each once
chunked: sections stay under the chunker's 320 tokens), in English and Chinese, every run. Each
section states a few facts (a fee, an hour, a host name, a person, a limit), and each fact has
questions in its document's language with the figure the answer must name.

- Documents: office guides (40 offices, the Chinese ones in Chinese), warehouse handbooks (60
  sites), project pages (100 projects), IT system guides (40), benefits and leave per country
  (15), travel and expenses per region (10), department handbooks (20), key-account notes (35).
- Topics are sections. `QuestionDraw` picks them with a Zipf skew over a fixed random ranking
  of topics, its exponent solved so that the hottest 10 % of topics get `hot_share` (0.5) of
  the questions; a follow-up asks about another section of the same document, in the same
  conversation. No two questions drawn have the same text: phrasings, openings and closings
  are combined, and a fact whose phrasings are used up is not asked again.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SEED = 35


@dataclass(frozen=True)
class Fact:
    questions: tuple[str, ...]  # phrasings, complete questions
    answer: str  # what a right answer names (a figure, a name, a host)


@dataclass
class Topic:
    doc: int  # index in Corpus.docs
    heading: str
    facts: list[Fact]
    lang: str


@dataclass
class Doc:
    filename: str
    title: str
    lang: str
    sections: list[tuple[str, str]] = field(default_factory=list)  # (heading, text)

    def markdown(self) -> str:
        body = "\n\n".join(f"## {h}\n\n{t}" for h, t in self.sections)
        return f"# {self.title}\n\n{body}\n"


@dataclass
class Corpus:
    docs: list[Doc]
    topics: list[Topic]

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for doc in self.docs:
            (folder / doc.filename).write_text(doc.markdown(), encoding="utf-8")


# --- the company's world ----------------------------------------------------------------------

OFFICES_EN = [
    ("Hamburg", "Germany", "EUR"), ("Rotterdam", "Netherlands", "EUR"), ("Chicago", "USA", "USD"),
    ("Antwerp", "Belgium", "EUR"), ("Gdansk", "Poland", "PLN"), ("Lyon", "France", "EUR"),
    ("Milan", "Italy", "EUR"), ("Valencia", "Spain", "EUR"), ("Gothenburg", "Sweden", "SEK"),
    ("Felixstowe", "UK", "GBP"), ("Dublin", "Ireland", "EUR"), ("Vienna", "Austria", "EUR"),
    ("Prague", "Czechia", "CZK"), ("Budapest", "Hungary", "HUF"), ("Zurich", "Switzerland", "CHF"),
    ("Copenhagen", "Denmark", "DKK"), ("Oslo", "Norway", "NOK"), ("Helsinki", "Finland", "EUR"),
    ("Lisbon", "Portugal", "EUR"), ("Athens", "Greece", "EUR"), ("Istanbul", "Turkey", "TRY"),
    ("Dubai", "UAE", "AED"), ("Mumbai", "India", "INR"), ("Singapore", "Singapore", "SGD"),
    ("Tokyo", "Japan", "JPY"), ("Busan", "South Korea", "KRW"), ("Sydney", "Australia", "AUD"),
    ("Los Angeles", "USA", "USD"), ("Houston", "USA", "USD"), ("Toronto", "Canada", "CAD"),
]  # fmt: skip
OFFICES_ZH = [
    ("上海", "Shanghai"), ("深圳", "Shenzhen"), ("北京", "Beijing"), ("广州", "Guangzhou"),
    ("宁波", "Ningbo"), ("青岛", "Qingdao"), ("天津", "Tianjin"), ("厦门", "Xiamen"),
    ("成都", "Chengdu"), ("武汉", "Wuhan"),
]  # fmt: skip
FIRST = [
    "Anna", "Ben", "Carla", "David", "Elena", "Felix", "Grace", "Hugo", "Ines", "Jonas", "Kira",
    "Lars", "Maya", "Nils", "Olga", "Paul", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen",
    "Yusuf", "Zoe", "Priya", "Mateo", "Aiko", "Leon", "Sofia", "Omar",
]  # fmt: skip
LAST = [
    "Becker", "Jansen", "Novak", "Rossi", "Garcia", "Lindqvist", "Murphy", "Kowalski", "Dubois",
    "Weber", "Silva", "Tanaka", "Kaya", "Costa", "Nielsen", "Hoffmann", "Moreau", "Berg",
    "Schmidt", "Fischer", "Patel", "Okafor", "Larsen", "Meyer", "Romano",
]  # fmt: skip
ZH_NAMES = [
    "王芳", "李伟", "张敏", "刘洋", "陈静", "杨磊", "赵丽", "黄强", "周婷", "吴军", "徐梅",
    "孙浩", "马琳", "朱峰", "胡洁", "郭涛",
]  # fmt: skip
CODENAMES = [
    "Albatross", "Beacon", "Cormorant", "Delta", "Estuary", "Fjord", "Gantry", "Harbor", "Isobar",
    "Jetty", "Keel", "Lighthouse", "Mooring", "Narwhal", "Orca", "Pelican", "Quay", "Rudder",
    "Sextant", "Tidewater", "Undertow", "Voyager", "Windlass", "Yardarm", "Zephyr",
]  # fmt: skip
PROJECT_KINDS = [
    "warehouse robotics pilot", "route optimisation", "customs paperwork automation",
    "cold-chain sensor rollout", "driver app redesign", "yard management upgrade",
    "carbon reporting", "invoice matching", "dock scheduling", "pallet tracking with RFID",
]  # fmt: skip
SYSTEMS = [
    ("VPN", "vpn"), ("Email and calendar", "mail"), ("Laptops", "laptops"), ("Printing", "print"),
    ("Atlas ERP", "atlas"), ("Harbor WMS", "harbor"), ("Compass TMS", "compass"),
    ("People HR portal", "people"), ("Expense tool Ledgerly", "ledgerly"),
    ("Service desk tickets", "servicedesk"), ("Office Wi-Fi", "wifi"), ("Mobile phones", "phones"),
    ("Multi-factor authentication", "mfa"), ("Passwords", "passwords"), ("Backups", "backup"),
    ("Software catalogue", "software"), ("Video meetings", "meet"), ("Shared drives", "drives"),
    ("Intranet Wharf", "wharf"), ("Data warehouse Tides", "tides"), ("BI dashboards", "dash"),
    ("Code hosting", "git"), ("CI pipelines", "ci"), ("Cloud accounts", "cloud"),
    ("Handheld scanners", "scanners"), ("Label printers", "labels"), ("EDI gateway", "edi"),
    ("Customer portal", "portal"), ("Telematics", "telematics"), ("Access badges", "badges"),
    ("CCTV", "cctv"), ("Desk booking", "desks"), ("E-learning", "learn"), ("Payroll", "payroll"),
    ("Contract database", "contracts"), ("Chat", "chat"), ("Document signing", "sign"),
    ("Translation service", "translate"), ("Analytics sandbox", "sandbox"), ("Archive", "archive"),
]  # fmt: skip
COUNTRIES = [
    ("Germany", "EUR"), ("Netherlands", "EUR"), ("USA", "USD"), ("Belgium", "EUR"),
    ("Poland", "PLN"), ("France", "EUR"), ("Italy", "EUR"), ("Spain", "EUR"), ("UK", "GBP"),
    ("Sweden", "SEK"), ("Singapore", "SGD"), ("Japan", "JPY"), ("India", "INR"),
    ("Canada", "CAD"),
]  # fmt: skip
REGIONS = [
    "Germany and Austria", "Benelux", "Nordics", "UK and Ireland", "Southern Europe",
    "Central Europe", "North America", "Middle East", "South and Southeast Asia", "Japan and Korea",
]  # fmt: skip
DEPARTMENTS = [
    "Operations", "Customer service", "Finance", "Human resources", "IT service desk", "Sales",
    "Legal", "Procurement", "Customs brokerage", "Fleet management", "Health and safety",
    "Quality", "Data and analytics", "Software engineering", "Facilities", "Marketing",
    "Internal audit", "Treasury", "Sustainability", "Training academy",
]  # fmt: skip
CUSTOMERS = [
    "Aurora Foods", "Baltic Timber", "Cobalt Pharma", "Dynamo Motors", "Evergreen Retail",
    "Falcon Electronics", "Granite Chemicals", "Helios Solar", "Ivory Fashion", "Juniper Beverages",
    "Kestrel Aerospace", "Lumen Lighting", "Meridian Medical", "Nimbus Toys", "Opal Cosmetics",
    "Pioneer Agritech", "Quartz Glassworks", "Redwood Furniture", "Sierra Sports", "Titan Steel",
    "Umbra Optics", "Vantage Paper", "Willow Textiles", "Xenon Batteries", "Yukon Outdoor",
    "Zenith Appliances", "Atlas Tyres", "Borealis Fish", "Cascade Coffee", "Delphi Instruments",
    "Ember Ceramics", "Fable Books", "Glacier Water", "Harvest Grains", "Indigo Paints",
]  # fmt: skip

OPENINGS_EN = (
    "", "Quick question: ", "Hi! ", "Hello, ", "Sorry to bother you: ", "Can you tell me: ",
    "I'm new here. ", "Question from my team: ", "Before my meeting: ", "Hi there, ",
)  # fmt: skip
CLOSINGS_EN = ("", " Thanks!", " Thank you.", " I need it today.", " Asking for a colleague.")
OPENINGS_ZH = ("", "请问，", "你好，", "麻烦问一下，", "打扰一下，", "我是新同事，", "想确认一下，")
CLOSINGS_ZH = ("", "谢谢！", "多谢。", "今天要用。", "帮同事问的。")


# What makes a handbook section as long as a real one (a passage of 150-250 tokens): the rules
# around its facts, exceptions, who to ask, when it changed.
MORE_EN = (
    "Exceptions need written approval from your line manager and are recorded in the request "
    "history, so that auditors can follow each decision later.",
    "If something here is unclear, ask your team lead first; they know the local arrangements "
    "and can escalate to the owner of this page when needed.",
    "Changes to these rules are announced on the intranet news page and in the monthly "
    "all-hands meeting at least two weeks before they take effect.",
    "Contractors and temporary staff follow the same rules unless their contract says "
    "otherwise; their agency contact can confirm the details.",
    "Please do not forward this information to customers or suppliers; it is meant for "
    "Northwind employees and may change without notice.",
    "Where local law sets a stricter rule, the local rule applies and the site's HR partner "
    "keeps a note of the difference in the local supplement.",
    "Feedback on this page is welcome: use the comment button at the bottom of the intranet "
    "version, and the owner answers within a week.",
    "New colleagues go through this part of the handbook with their buddy during the first "
    "week, and confirm in the training portal that they have read it.",
    "During peak season, from mid-October to the end of December, some of these arrangements "
    "change; the peak-season plan is published in September.",
    "Records related to this section are kept for ten years in the archive, as required for "
    "customs and tax audits in most of the countries we operate in.",
    "Requests made through email instead of the proper tool are not processed; they are sent "
    "back with a link to the right form.",
    "The numbers above are reviewed every year in January; the date of the last review is "
    "shown in the page history of the intranet version.",
)
MORE_ZH = (
    "如有特殊情况，须经直属主管书面批准，并在申请记录中留档，以便日后审计查阅。",
    "如对本节内容有疑问，请先咨询团队负责人；必要时由其联系本页面负责人。",
    "本规定如有变更，将至少提前两周在内网新闻页和月度全员大会上公布。",
    "外包及临时员工同样适用本规定，除非合同另有约定。",
    "请勿将本信息转发给客户或供应商，内容仅供公司内部员工参考，可能随时调整。",
    "若当地法规有更严格的要求，以当地法规为准，人力资源部会在当地补充说明中注明差异。",
    "新员工入职第一周会在导师陪同下学习本手册相关内容，并在培训平台确认已阅读。",
    "每年十月中旬至十二月底为业务高峰期，部分安排会有调整，高峰期方案于九月公布。",
)


class Writer:
    """Sections with their facts, for one document."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.sections: list[tuple[str, str, list[Fact]]] = []

    def add(self, heading: str, text: str, facts: list[Fact]) -> None:
        pool = MORE_ZH if self.lang == "zh" else MORE_EN
        more = self.rng.sample(pool, self.rng.randint(3, 5) if self.lang == "en" else 4)
        ref = f"NWL-{self.rng.choice(['OPS', 'HR', 'IT', 'FIN', 'QHS'])}-{self.rng.randint(100, 9999)}"
        note = f"参考编号：{ref}。" if self.lang == "zh" else f"Reference: {ref}."
        sep = "" if self.lang == "zh" else " "
        self.sections.append((heading, sep.join([text, *more, note]), facts))

    def person(self) -> str:
        if self.lang == "zh":
            return self.rng.choice(ZH_NAMES)
        return f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"

    def phone(self) -> str:
        return f"+{self.rng.randint(30, 99)} {self.rng.randint(100, 999)} {self.rng.randint(1000, 9999)} {self.rng.randint(10, 99)}"


def fact(answer: str, *questions: str) -> Fact:
    return Fact(tuple(questions), answer)


# --- documents ----------------------------------------------------------------------------------


def office_en(w: Writer, city: str, country: str, cur: str) -> str:
    r = w.rng
    street = f"{r.randint(2, 180)} {r.choice(['Harbour', 'Dock', 'Canal', 'Quay', 'Station', 'Mill'])} {r.choice(['Street', 'Road', 'Avenue', 'Lane'])}"
    floor = r.randint(2, 9)
    w.add(
        "Address and reception",
        f"The {city} office is at {street}, {city}, {country}. Reception is on floor {floor} and "
        f"is staffed from 08:00 to 17:30 on working days. Visitors sign in at the reception "
        f"kiosk with their host's name; the host collects them within ten minutes. Post and "
        f"parcels for employees are held at reception for five working days.",
        [
            fact(street, f"What is the address of the {city} office?",
                 f"Where exactly is our {city} office?", f"Which street is the {city} office on?"),
            fact(f"floor {floor}", f"On which floor is the reception in the {city} office?",
                 f"Where do I find reception at the {city} office?"),
        ],
    )  # fmt: skip
    open_h, close_h = r.choice(["06:30", "07:00", "07:30"]), r.choice(["20:00", "21:00", "22:00"])
    w.add(
        "Opening hours and access",
        f"The building opens at {open_h} and closes at {close_h} from Monday to Friday. Outside "
        "these hours, enter with your access badge through the side entrance; the alarm is "
        "disarmed automatically for badges registered to this site. At weekends the office is "
        "closed except for the operations floor, which needs a weekend access request in the "
        "badge system two working days ahead.",
        [
            fact(open_h, f"What time does the {city} office open?",
                 f"When does the {city} building open in the morning?"),
            fact(close_h, f"What time does the {city} office close?",
                 f"Until when is the {city} office open on weekdays?"),
        ],
    )  # fmt: skip
    fee, spaces = r.choice([6, 8, 10, 12, 15, 18, 20, 25]), r.randint(20, 160)
    w.add(
        "Parking",
        f"The office garage has {spaces} spaces, of which eight are reserved for electric cars "
        f"with chargers. Parking costs {cur} {fee} per day, deducted from your salary at the end "
        "of the month; visitors park free for up to four hours when their host registers the "
        "number plate. Bicycles go in the secure room next to the garage entrance.",
        [
            fact(f"{fee}", f"How much does parking cost per day at the {city} office?",
                 f"What is the daily parking fee in {city}?",
                 f"What do I pay to park a day at the {city} office?"),
            fact(f"{spaces}", f"How many parking spaces does the {city} office garage have?"),
        ],
    )  # fmt: skip
    c_open, c_close = r.choice(["11:30", "11:45", "12:00"]), r.choice(["13:45", "14:00", "14:30"])
    meal = r.choice([3, 4, 5, 6, 7, 8])
    w.add(
        "Canteen",
        f"The canteen serves lunch from {c_open} to {c_close}. A main dish costs {cur} {meal} "
        "with the employee badge; there is always one vegetarian and one vegan option. "
        "Breakfast and coffee are free in the kitchen on each floor. The weekly menu is on the "
        "intranet on Friday afternoon.",
        [
            fact(c_open, f"When does the canteen open for lunch in {city}?",
                 f"What are the canteen hours at the {city} office?"),
            fact(f"{meal}", f"How much is a main dish in the {city} canteen?"),
        ],
    )  # fmt: skip
    ssid = f"NWL-{city.replace(' ', '')[:6].upper()}-STAFF"
    printer = f"PRN-{city[:3].upper()}-{r.randint(10, 99)}"
    w.add(
        "Wi-Fi and printing",
        f"Staff laptops join the network {ssid} automatically. Guests use NWL-GUEST with the "
        f"daily password shown on the reception screen. The main printer on each floor is "
        f"{printer}; print jobs are released with your badge. Colour printing needs a cost "
        "centre approved by your manager.",
        [
            fact(ssid, f"What is the staff Wi-Fi network at the {city} office?"),
            fact(printer, f"Which printer should I use in the {city} office?",
                 f"What is the name of the main printer in {city}?"),
        ],
    )  # fmt: skip
    rooms, big = r.randint(6, 30), r.choice(["Atlantic", "Pacific", "Baltic", "Nordic", "Harbour"])
    w.add(
        "Meeting rooms",
        f"There are {rooms} bookable meeting rooms. The largest, {big}, seats 24 people and has "
        "a video wall; book it at least two days ahead. Rooms are released automatically when "
        "nobody checks in within 15 minutes of the start. Catering for meetings is ordered "
        "through facilities by 14:00 the day before.",
        [
            fact(big, f"What is the largest meeting room in the {city} office?"),
            fact(f"{rooms}", f"How many meeting rooms can I book in {city}?"),
        ],
    )  # fmt: skip
    warden, drill = w.person(), r.choice(["March", "April", "May", "September", "October"])
    w.add(
        "Safety and emergencies",
        f"The fire warden for the office is {warden}. The assembly point is the car park across "
        f"the street. The yearly evacuation drill takes place in {drill}. First-aid kits and a "
        "defibrillator are next to the lifts on every floor. In an emergency call the local "
        "emergency number first, then the site security desk.",
        [
            fact(warden.split()[-1], f"Who is the fire warden at the {city} office?"),
            fact(drill, f"When is the evacuation drill at the {city} office?"),
        ],
    )  # fmt: skip
    line = r.choice(["S1", "S3", "U4", "tram 7", "bus 112", "metro line 2", "the airport train"])
    w.add(
        "Getting there",
        f"The nearest public transport stop is served by {line}, six minutes on foot. The "
        "company pays 50 % of a monthly public transport pass; claim it in the expense tool "
        "with the receipt. From the airport a taxi takes about 30 minutes; book it through the "
        "travel portal to be billed to the company.",
        [fact(line, f"Which public transport goes to the {city} office?",
              f"How do I get to the {city} office by public transport?")],
    )  # fmt: skip
    lead = w.person()
    w.add(
        "Site leadership and contacts",
        f"The site manager is {lead}. Facilities requests go to facilities-"
        f"{city.lower().replace(' ', '')}@northwind.example; urgent building issues outside "
        f"office hours go to the security desk at {w.phone()}. HR holds an open desk here every "
        "second Tuesday.",
        [fact(lead.split()[-1], f"Who is the site manager of the {city} office?",
              f"Who runs the {city} office?")],
    )  # fmt: skip
    return f"Office guide: {city}"


def office_zh(w: Writer, city: str, pinyin: str) -> str:
    r = w.rng
    floor, fee = r.randint(3, 28), r.choice([10, 15, 20, 25, 30])
    w.add(
        "地址与前台",
        f"{city}办公室位于{city}市{r.choice(['浦东新区', '南山区', '朝阳区', '天河区', '鄞州区'])}"
        f"{r.choice(['世纪大道', '科技园路', '建国路', '珠江新城', '滨江路'])}{r.randint(10, 999)}号，"
        f"前台在{floor}楼，工作日8:30至17:30有人值守。访客须在前台登记并由接待人陪同。",
        [fact(f"{floor}", f"{city}办公室的前台在几楼？", f"{city}办公室前台在哪一层？")],
    )  # fmt: skip
    w.add(
        "停车",
        f"地下车库共有{r.randint(30, 200)}个车位，员工停车每天{fee}元，月底从工资中扣除。"
        "访客由接待人登记车牌后可免费停车四小时。电动车充电桩位于B2层。",
        [fact(f"{fee}", f"{city}办公室停车一天多少钱？", f"在{city}办公室停车每天收费多少？")],
    )  # fmt: skip
    c_open, meal = r.choice(["11:30", "11:45", "12:00"]), r.choice([12, 15, 18, 20])
    w.add(
        "食堂",
        f"员工食堂午餐时间为{c_open}至13:30，刷工卡每份套餐{meal}元，每天提供素食选择。"
        "每周菜单于周五下午在内网公布。各楼层茶水间提供免费咖啡。",
        [fact(c_open, f"{city}办公室食堂几点开始供应午餐？"),
         fact(f"{meal}", f"{city}食堂一份套餐多少钱？")],
    )  # fmt: skip
    ssid = f"NWL-{pinyin[:6].upper()}-STAFF"
    w.add(
        "无线网络与打印",
        f"员工电脑自动连接{ssid}网络；访客使用NWL-GUEST，每日密码显示在前台屏幕上。"
        f"每层的主打印机为PRN-{pinyin[:3].upper()}-{r.randint(10, 99)}，刷工卡取件。",
        [fact(ssid, f"{city}办公室员工用哪个无线网络？")],
    )  # fmt: skip
    rooms = r.randint(6, 24)
    w.add(
        "会议室",
        f"共有{rooms}间可预订会议室，最大的“东海厅”可容纳20人并配有视频会议设备。"
        "会议开始15分钟内未签到将自动释放。会议茶歇需在前一天14:00前向行政部预订。",
        [fact(f"{rooms}", f"{city}办公室有多少间会议室？")],
    )  # fmt: skip
    warden = w.person()
    w.add(
        "安全与应急",
        f"本办公室消防负责人为{warden}。紧急集合点为大楼东侧广场。每年十月进行一次消防演练。"
        "急救箱和除颤仪放在每层电梯旁。",
        [fact(warden, f"{city}办公室的消防负责人是谁？")],
    )  # fmt: skip
    line = r.choice(["2号线", "4号线", "10号线", "1号线", "机场快线"])
    w.add(
        "交通",
        f"最近的地铁站为{line}，步行约六分钟。公司报销每月公共交通卡费用的50%，"
        "在报销系统中上传发票即可。从机场乘出租车约40分钟，请通过差旅平台预订。",
        [fact(line, f"去{city}办公室坐哪条地铁线？")],
    )  # fmt: skip
    lead = w.person()
    w.add(
        "负责人与联系方式",
        f"办公室负责人为{lead}。行政事务请发邮件至facilities-{pinyin.lower()}@northwind.example；"
        f"非工作时间的紧急情况请联系保安值班台{w.phone()}。人力资源部每两周周二在此设开放日。",
        [fact(lead, f"{city}办公室的负责人是谁？")],
    )  # fmt: skip
    start = r.choice(["8:30", "9:00"])
    w.add(
        "工作时间与门禁",
        f"办公室工作时间为周一至周五{start}至18:00。非工作时间请刷工卡从侧门进入；"
        "周末进入需提前两个工作日在门禁系统中申请。",
        [fact(start, f"{city}办公室几点上班？")],
    )  # fmt: skip
    return f"{city}办公室指南"


def warehouse(w: Writer, code: str, city: str) -> str:
    r = w.rng
    shifts = r.choice(["06:00-14:00, 14:00-22:00 and 22:00-06:00", "05:00-13:30 and 13:30-22:00"])
    w.add(
        "Shifts",
        f"Warehouse {code} in {city} runs shifts {shifts}. Handover takes ten minutes at the "
        "shift lead's desk; the outgoing lead writes open issues into the shift log in Harbor "
        "WMS. Swapping a shift needs the shift lead's approval a day ahead.",
        [fact(shifts.split()[0], f"What are the shift times at warehouse {code}?",
              f"When do shifts start at the {city} warehouse {code}?")],
    )  # fmt: skip
    docks, cutoff = r.randint(8, 48), r.choice(["15:00", "16:00", "17:00", "18:30"])
    w.add(
        "Docks and cut-off times",
        f"The site has {docks} loading docks. Outbound orders received before {cutoff} leave the "
        "same day; later orders leave the next working day. Carriers book dock slots in the "
        "yard system at least four hours ahead; a truck more than 30 minutes late loses its "
        "slot.",
        [fact(cutoff, f"What is the same-day cut-off time at warehouse {code}?",
              f"Until when do orders leave the same day from {code} in {city}?"),
         fact(f"{docks}", f"How many loading docks does warehouse {code} have?")],
    )  # fmt: skip
    cert = r.choice([12, 24, 36])
    w.add(
        "Forklifts",
        f"Only certified drivers may operate forklifts; the certificate must be renewed every "
        f"{cert} months at the training academy. Before every shift the driver completes the "
        "checklist on the truck's tablet. Pedestrians stay inside the green walkways; speed "
        "inside the hall is limited to 6 km/h.",
        [fact(f"{cert}", f"How often must forklift certificates be renewed at {code}?")],
    )  # fmt: skip
    low, high = r.choice([(2, 8), (0, 4), (15, 25)])
    w.add(
        "Cold chain",
        f"Chilled goods are stored between {low} and {high} °C. Temperature loggers report "
        "every five minutes; an alarm goes to the shift lead's phone after ten minutes outside "
        "the range. Doors of the cold store must not stay open longer than 90 seconds.",
        [fact(f"{low}", f"What temperature range is used for chilled goods at {code}?")],
    )  # fmt: skip
    cls = r.choice(["3 and 8", "2, 3 and 9", "only class 9", "4.1 and 8"])
    w.add(
        "Dangerous goods",
        f"Warehouse {code} is licensed for dangerous goods of classes {cls}. They are stored in "
        "the fenced area at the north wall with spill kits at each end. Only employees with the "
        "ADR awareness course may handle them; the course lasts half a day.",
        [fact(cls.split()[0] if cls[0].isdigit() else "9",
              f"Which dangerous goods classes may warehouse {code} store?")],
    )  # fmt: skip
    acc = r.choice(["99.2", "99.5", "99.7", "99.8"])
    w.add(
        "Targets",
        f"The site targets a picking accuracy of {acc} % and dispatch of 98 % of orders on time. "
        "Results are shown on the dashboard at the canteen entrance every Monday. Teams that "
        "meet both targets for a quarter share a bonus pool.",
        [fact(acc, f"What picking accuracy does warehouse {code} aim for?")],
    )  # fmt: skip
    lead = w.person()
    w.add(
        "Contacts",
        f"The warehouse manager is {lead}. The shift leads' phone is {w.phone()}. Health and "
        "safety questions go to the site safety officer, whose office is next to the first-aid "
        "room.",
        [fact(lead.split()[-1], f"Who is the manager of warehouse {code}?",
              f"Who runs the {city} warehouse {code}?")],
    )  # fmt: skip
    scanner = r.choice(["Zebra MC9400", "Honeywell CK65", "Datalogic Skorpio X5"])
    w.add(
        "Scanners and labels",
        f"Handheld scanners ({scanner}) are in the charging racks next to the shift lead's desk; "
        "take one with your badge and return it at the end of the shift. Damaged labels are "
        "reprinted at the label station by scanning the pallet's licence plate.",
        [fact(scanner.split()[0], f"Which handheld scanners are used at warehouse {code}?")],
    )  # fmt: skip
    returns = r.choice(["Tuesday and Thursday", "Monday and Wednesday", "every weekday"])
    w.add(
        "Returns",
        f"Customer returns are received on {returns} at dock 1. Each return needs an RMA number "
        "from customer service; parcels without one are refused and sent back to the carrier. "
        "Inspected goods go back to stock within two working days.",
        [fact(returns.split()[0], f"On which days does warehouse {code} receive returns?")],
    )  # fmt: skip
    visitor = r.choice([24, 48, 72])
    w.add(
        "Visitors",
        f"Visitors are announced at least {visitor} hours ahead in the badge system and wear a "
        "high-visibility vest and safety shoes on the floor. Photography inside the hall is "
        "not allowed.",
        [fact(f"{visitor}", f"How far ahead must visitors be announced at warehouse {code}?")],
    )  # fmt: skip
    return f"Warehouse {code} ({city}) handbook"


def warehouse_zh(w: Writer, code: str, city: str) -> str:
    r = w.rng
    first = r.choice(["6:00", "7:00"])
    w.add(
        "班次",
        f"{city}{code}仓库实行三班制，早班{first}开始，每班八小时。交接班在班组长工位进行，"
        "用时约十分钟，未完成事项须记录在Harbor仓储系统的交接日志中。调班须提前一天经班组长批准。",
        [fact(first, f"{code}仓库早班几点开始？", f"{city}的{code}仓库几点开始上早班？")],
    )  # fmt: skip
    docks, cutoff = r.randint(8, 40), r.choice(["15:00", "16:00", "17:00"])
    w.add(
        "月台与截单时间",
        f"仓库共有{docks}个装卸月台。{cutoff}前收到的出库订单当天发出，之后的订单次日发出。"
        "承运商须至少提前四小时在场院系统中预约月台，迟到超过30分钟将取消预约。",
        [fact(cutoff, f"{code}仓库当天发货的截单时间是几点？"),
         fact(f"{docks}", f"{code}仓库有多少个装卸月台？")],
    )  # fmt: skip
    cert = r.choice([12, 24])
    w.add(
        "叉车",
        f"只有持证人员可以驾驶叉车，证书每{cert}个月须在培训中心复审一次。每班开始前，"
        "司机须在车载平板上完成检查清单。行人须走绿色通道，库内车速不得超过每小时6公里。",
        [fact(f"{cert}", f"{code}仓库的叉车证多久复审一次？")],
    )  # fmt: skip
    low, high = r.choice([(2, 8), (0, 4)])
    w.add(
        "冷链",
        f"冷藏货物储存温度为{low}至{high}摄氏度。温度记录仪每五分钟上报一次，超出范围十分钟后"
        "会向班组长手机发送警报。冷库门开启时间不得超过90秒。",
        [fact(f"{low}", f"{code}仓库冷藏货物的温度范围是多少？")],
    )  # fmt: skip
    acc = r.choice(["99.2", "99.5", "99.7"])
    w.add(
        "考核目标",
        f"本仓库拣货准确率目标为{acc}%，准时发货率目标为98%。每周一在食堂入口的看板上公布结果，"
        "连续一个季度达标的班组可分享奖金池。",
        [fact(acc, f"{code}仓库的拣货准确率目标是多少？")],
    )  # fmt: skip
    lead = w.person()
    w.add(
        "联系人",
        f"仓库经理为{lead}。班组长值班电话为{w.phone()}。安全问题请联系现场安全员，"
        "其办公室在急救室旁边。",
        [fact(lead, f"{code}仓库的经理是谁？", f"{city}{code}仓库由谁负责？")],
    )  # fmt: skip
    returns = r.choice(["周二和周四", "周一和周三", "每个工作日"])
    w.add(
        "退货",
        f"客户退货在{returns}于1号月台接收，每件退货须有客服提供的退货授权号，否则拒收。"
        "检验合格的货物在两个工作日内重新上架。",
        [fact(returns[:2], f"{code}仓库哪几天接收退货？")],
    )  # fmt: skip
    visitor = r.choice([24, 48])
    w.add(
        "访客",
        f"访客须至少提前{visitor}小时在门禁系统中登记，进入作业区须穿反光背心和安全鞋，"
        "库内禁止拍照。",
        [fact(f"{visitor}", f"访问{code}仓库需要提前多久登记？")],
    )  # fmt: skip
    scanner = r.choice(["斑马MC9400", "霍尼韦尔CK65"])
    w.add(
        "扫描枪与标签",
        f"手持扫描枪（{scanner}）放在班组长工位旁的充电架上，刷工卡领取，下班前归还。"
        "破损标签可在标签站扫描托盘号重新打印。",
        [fact(scanner[:2], f"{code}仓库用的是什么扫描枪？")],
    )  # fmt: skip
    goods = r.choice(["第3类和第8类", "第9类", "第2类和第3类"])
    w.add(
        "危险品",
        f"本仓库获准存放{goods}危险品，存放于北墙围栏区，两端配有泄漏应急包。"
        "只有完成半天危险品意识培训的员工才能操作。",
        [fact(goods[:2], f"{code}仓库可以存放哪些类别的危险品？")],
    )  # fmt: skip
    return f"{code}仓库（{city}）手册"


def project(w: Writer, name: str, kind: str) -> str:
    r = w.rng
    lead, sponsor = w.person(), w.person()
    w.add(
        "Summary",
        f"Project {name} is Northwind's {kind}. It started in {r.choice(['January', 'March', 'June', 'September'])} "
        f"{r.choice([2024, 2025])} and is led by {lead}; the sponsor on the management board is "
        f"{sponsor}. Questions about the project go to its channel #proj-{name.lower()}.",
        [fact(lead.split()[-1], f"Who leads project {name}?", f"Who is the lead of {name}?"),
         fact(sponsor.split()[-1], f"Who sponsors project {name}?")],
    )  # fmt: skip
    budget = r.choice([180, 240, 320, 450, 600, 750, 900, 1200])
    w.add(
        "Budget",
        f"The approved budget of {name} is EUR {budget},000 for the current year, of which 40 % "
        "is external services. Spending above EUR 25,000 in one order needs the sponsor's "
        "approval in the procurement tool. The budget is reviewed every quarter.",
        [fact(f"{budget}", f"What is the budget of project {name}?",
              f"How much money does {name} have this year?")],
    )  # fmt: skip
    m1, m2 = r.choice(["Q1", "Q2"]), r.choice(["Q3", "Q4"])
    w.add(
        "Milestones",
        f"The pilot goes live in {m1}; the rollout to all sites is planned for {m2}. Each "
        "milestone ends with a review by the steering committee, which meets on the first "
        "Wednesday of the month.",
        [fact(m2, f"When is the rollout of project {name} planned?"),
         fact(m1, f"When does the {name} pilot go live?")],
    )  # fmt: skip
    stack = r.choice(["Python and PostgreSQL", "Go and Kafka", "Java and Oracle",
                      "TypeScript and Firebase", "Python and TimescaleDB"])  # fmt: skip
    w.add(
        "Technology",
        f"{name} is built with {stack}; it runs in the company's cloud account for the project. "
        f"The code is in the repository northwind/{name.lower()}; pull requests need one review. "
        "Deployments go through the CI pipeline only.",
        [fact(stack.split()[0], f"What technology does project {name} use?"),
         fact(f"northwind/{name.lower()}", f"Where is the code of project {name}?")],
    )  # fmt: skip
    risk = r.choice(["supplier delays for sensors", "union consultation at two sites",
                     "data quality in the legacy ERP", "customs rule changes", "staff turnover"])  # fmt: skip
    w.add(
        "Risks",
        f"The main risk of {name} is {risk}. Mitigations are tracked in the risk register, "
        "owned by the project lead, and reported to the steering committee monthly.",
        [fact(risk.split()[0], f"What is the main risk of project {name}?")],
    )  # fmt: skip
    status = r.choice(["green", "amber", "red"])
    w.add(
        "Status",
        f"At the last steering committee the status of {name} was {status}. "
        f"{'It is on plan.' if status == 'green' else 'The plan is being reviewed.'} The next "
        "status report is due on the last working day of the month.",
        [fact(status, f"What is the current status of project {name}?")],
    )  # fmt: skip
    size = r.randint(4, 22)
    w.add(
        "Team",
        f"The core team has {size} people from operations, IT and finance; two of them work "
        "full time on it. New members get access through a request to the project lead.",
        [fact(f"{size}", f"How many people are in the core team of {name}?")],
    )  # fmt: skip
    day = r.choice(["Monday", "Tuesday", "Thursday"])
    w.add(
        "Meetings",
        f"The team meets every {day} at 10:00 for 30 minutes. Decisions are written into the "
        "decision log on the project's intranet page the same day.",
        [fact(day, f"When does the {name} team meet?")],
    )  # fmt: skip
    sites = r.choice(["Hamburg and Rotterdam", "Chicago", "Shanghai and Ningbo", "Antwerp"])
    w.add(
        "Pilot sites",
        f"The pilot runs at {sites}. Site managers there appoint a local champion who collects "
        "feedback every week.",
        [fact(sites.split()[0], f"Where does project {name} run its pilot?")],
    )  # fmt: skip
    kpi = r.choice(["12 %", "15 %", "20 %", "8 %"])
    w.add(
        "Expected benefits",
        f"{name} is expected to cut the cost of its process by {kpi} within a year of the "
        "rollout, measured against the baseline taken before the pilot.",
        [fact(kpi.split()[0], f"How much should project {name} save?")],
    )  # fmt: skip
    return f"Project {name}"


def it_system(w: Writer, name: str, slug: str) -> str:
    r = w.rng
    url = f"https://{slug}.northwind.example"
    w.add(
        "What it is",
        f"{name} is used across Northwind. It is reached at {url} with the company account and "
        "multi-factor authentication. Its service owner is the IT platform team.",
        [fact(url.split("//")[1], f"What is the address of {name}?", f"Where do I log in to {name}?")],
    )  # fmt: skip
    days = r.randint(1, 5)
    w.add(
        "Getting access",
        f"Request access in the service desk portal under 'Access requests', choosing {name}. "
        f"Your manager approves it, and access is usually granted within {days} working days. "
        "Temporary access for contractors expires after 90 days.",
        [fact(f"{days}", f"How long does it take to get access to {name}?",
              f"How do I request access to {name}?")],
    )  # fmt: skip
    hours = r.choice(["07:00 to 19:00", "08:00 to 18:00", "around the clock"])
    w.add(
        "Support",
        f"Support for {name} is available {hours} on working days through the service desk, "
        f"category '{name}'. Priority 1 incidents are answered within 30 minutes.",
        [fact(hours.split()[0], f"When is support for {name} available?")],
    )  # fmt: skip
    limit = r.choice(["50 GB", "100 GB", "2 TB", "10 GB", "500 MB"])
    w.add(
        "Limits",
        f"Each user of {name} has a quota of {limit}. Larger needs are requested through the "
        "service desk with a reason and a cost centre.",
        [fact(limit.split()[0], f"What is the storage quota in {name}?")],
    )  # fmt: skip
    keep = r.choice([30, 90, 180, 365])
    w.add(
        "Data retention",
        f"Data in {name} is kept for {keep} days unless a legal hold applies. Deleted items can "
        "be restored by the service desk within 14 days.",
        [fact(f"{keep}", f"How long is data kept in {name}?")],
    )  # fmt: skip
    issue = r.choice(["slow logins on Monday mornings", "sessions ending after 8 hours",
                      "exports failing above 100,000 rows", "mobile notifications arriving late"])  # fmt: skip
    w.add(
        "Known issues",
        f"A known issue of {name} is {issue}. A fix is planned for the next release; until then "
        "the workaround is described in the knowledge article on the intranet.",
        [fact(issue.split()[0], f"Is there a known issue with {name}?")],
    )  # fmt: skip
    course = r.choice([20, 30, 45, 60])
    w.add(
        "Training",
        f"New users take the {course}-minute e-learning course on {name} in the training "
        "portal. Advanced sessions are offered every quarter.",
        [fact(f"{course}", f"How long is the training course for {name}?")],
    )  # fmt: skip
    owner = w.person()
    w.add(
        "Owner",
        f"The business owner of {name} is {owner}, who decides on changes together with the "
        "IT platform team. Change requests are collected every month.",
        [fact(owner.split()[-1], f"Who owns {name}?", f"Who is the business owner of {name}?")],
    )  # fmt: skip
    window = r.choice(["Saturday 22:00-02:00", "Sunday 06:00-08:00", "Wednesday 21:00-23:00"])
    w.add(
        "Maintenance",
        f"Planned maintenance of {name} takes place {window}; it is announced three days ahead "
        "on the intranet status page.",
        [fact(window.split()[0], f"When is the maintenance window of {name}?")],
    )  # fmt: skip
    device = r.choice(["Windows and macOS", "Windows only", "any browser", "iOS and Android"])
    w.add(
        "Supported devices",
        f"{name} supports {device}. Personal devices may be used only with the company's "
        "mobile device management installed.",
        [fact(device.split()[0], f"Which devices does {name} support?")],
    )  # fmt: skip
    return f"IT guide: {name}"


def benefits(w: Writer, country: str, cur: str) -> str:
    r = w.rng
    leave = r.choice([25, 26, 27, 28, 30])
    w.add(
        "Annual leave",
        f"Employees in {country} have {leave} days of paid annual leave a year, plus one day "
        "after five years of service. Up to five unused days may be carried over to March of "
        "the next year. Leave is requested in the People HR portal.",
        [fact(f"{leave}", f"How many days of annual leave do employees in {country} get?",
              f"How much holiday do I get per year in {country}?")],
    )  # fmt: skip
    sick = r.choice([1, 2, 3])
    w.add(
        "Sick leave",
        f"Report sickness to your manager before your shift starts. A doctor's note is needed "
        f"from day {sick + 1} of absence. Pay continues in full for six weeks.",
        [fact(f"{sick + 1}", f"From which day of sickness do I need a doctor's note in {country}?")],
    )  # fmt: skip
    parental = r.choice([12, 16, 18, 20, 26])
    w.add(
        "Parental leave",
        f"Northwind tops up statutory parental pay to full salary for {parental} weeks. Tell HR "
        "at least eight weeks before the leave starts.",
        [fact(f"{parental}", f"How many weeks of parental leave does Northwind pay in {country}?")],
    )  # fmt: skip
    meal = r.choice([5, 6, 7, 8, 10])
    w.add(
        "Meal allowance",
        f"Office employees receive a meal allowance of {cur} {meal} per working day, paid with "
        "the salary. It is not paid on days of leave or business travel with per diems.",
        [fact(f"{meal}", f"What is the daily meal allowance in {country}?")],
    )  # fmt: skip
    pension = r.choice([3, 4, 5, 6])
    w.add(
        "Pension",
        f"Northwind pays {pension} % of base salary into the company pension plan and matches "
        "employee contributions up to a further 2 %.",
        [fact(f"{pension}", f"How much does Northwind pay into the pension in {country}?")],
    )  # fmt: skip
    train = r.choice([800, 1000, 1200, 1500, 2000])
    w.add(
        "Training budget",
        f"Each employee has a training budget of {cur} {train} a year for courses agreed with "
        "their manager. Language courses are paid in full on top of it.",
        [fact(f"{train}", f"What is the yearly training budget per employee in {country}?")],
    )  # fmt: skip
    probation = r.choice([3, 6])
    w.add(
        "Probation and notice",
        f"The probation period is {probation} months with two weeks' notice. After probation "
        "the notice period is one month for the first two years, then three months.",
        [fact(f"{probation}", f"How long is the probation period in {country}?")],
    )  # fmt: skip
    commute = r.choice([30, 40, 50, 60])
    w.add(
        "Commuting",
        f"Northwind pays {commute} % of a public transport season ticket, or a bicycle "
        "allowance for those who cycle at least three days a week.",
        [fact(f"{commute}", f"How much of my commute does Northwind pay in {country}?")],
    )  # fmt: skip
    health = r.choice(["a yearly health check", "gym membership support", "eye tests"])
    w.add(
        "Health",
        f"Employees in {country} are offered {health} and the confidential employee assistance "
        "programme, reachable around the clock.",
        [fact(health.split()[1], f"What health benefits are offered in {country}?")],
    )  # fmt: skip
    days = r.choice([2, 3])
    w.add(
        "Remote work",
        f"Office employees may work from home up to {days} days a week in agreement with their "
        "team. Working from abroad is allowed for up to 20 days a year with HR's approval.",
        [fact(f"{days}", f"How many days a week can I work from home in {country}?")],
    )  # fmt: skip
    return f"Benefits and leave: {country}"


def benefits_zh(w: Writer) -> str:
    r = w.rng
    items = [
        ("年假", f"在中国工作的员工每年享有{r.choice([10, 12, 15])}天带薪年假，工作满五年后增加五天。",
         "天", "在中国入职第一年有多少天年假？"),
        ("病假", f"病假需在上班前告知主管，连续病假超过{r.choice([1, 2])}天需提供医院证明。",
         "天", "病假几天以上需要医院证明？"),
        ("餐补", f"每个工作日发放餐饮补贴{r.choice([20, 25, 30, 35])}元，随工资发放。",
         "元", "每个工作日的餐补是多少钱？"),
        ("交通补贴", f"公司每月提供交通补贴{r.choice([300, 400, 500])}元。", "元", "每月交通补贴多少？"),
        ("住房公积金", f"公司按基本工资的{r.choice([7, 10, 12])}%缴纳住房公积金。", "%",
         "公司按多少比例缴纳住房公积金？"),
        ("补充医疗保险", f"公司为员工购买补充医疗保险，年度报销上限{r.choice([2, 3, 5])}万元。",
         "万元", "补充医疗保险每年最多报销多少？"),
        ("培训预算", f"每位员工每年有{r.choice([3000, 5000, 8000])}元培训预算，需经主管批准。",
         "元", "每年的培训预算是多少？"),
        ("试用期", f"试用期为{r.choice([3, 6])}个月，试用期内提前三天通知即可离职。", "个月",
         "试用期多长？"),
        ("远程办公", f"经团队同意，每周最多可居家办公{r.choice([1, 2])}天。", "天", "每周最多可以居家办公几天？"),
        ("体检", f"公司每年安排一次免费体检，通常在{r.choice(['四月', '五月', '十月'])}进行。", "月",
         "年度体检一般在几月？"),
        ("年终奖", f"年终奖一般在{r.choice(['一月', '二月'])}随工资发放，金额与绩效挂钩。", "月",
         "年终奖什么时候发？"),
    ]  # fmt: skip
    for heading, text, _unit, q in items:
        number = "".join(c for c in text.split("，")[0] if c.isdigit()) or text[-6:-2]
        w.add(
            heading, text + "如有疑问请联系人力资源部。", [fact(number, q, q.replace("？", "呢？"))]
        )
    return "员工福利与假期（中国）"


def travel(w: Writer, region: str) -> str:
    r = w.rng
    cities = r.sample([c for c, _, _ in OFFICES_EN], 3)
    caps = {c: r.choice([140, 160, 180, 200, 220, 240, 260]) for c in cities}
    for c in cities:
        w.add(
            f"Hotels in {c}",
            f"When travelling in {region}, the hotel limit in {c} is EUR {caps[c]} per night, "
            "breakfast included. Book through the travel portal; a hotel above the limit needs "
            "your director's approval before booking. Long stays of more than 14 nights use "
            "serviced apartments.",
            [fact(f"{caps[c]}", f"What is the hotel limit per night in {c}?",
                  f"How expensive may my hotel in {c} be per night?",
                  f"What can I spend on a hotel in {c}?")],
        )  # fmt: skip
    diem = r.choice([28, 32, 36, 40, 45, 50])
    w.add(
        "Per diem",
        f"The daily allowance for meals on business trips in {region} is EUR {diem}; it is "
        "reduced by 20 % for each meal the company or a customer pays.",
        [fact(f"{diem}", f"What is the per diem for trips in {region}?")],
    )  # fmt: skip
    km = r.choice(["0.30", "0.35", "0.38", "0.42"])
    w.add(
        "Private car",
        f"Business trips with your own car in {region} are reimbursed at EUR {km} per km. Log "
        "start, destination and distance in the expense tool.",
        [fact(km, f"How much per km is paid for my own car in {region}?")],
    )  # fmt: skip
    hours = r.choice([4, 5, 6])
    w.add(
        "Flights and trains",
        f"Economy class is the rule; flights longer than {hours} hours may be booked in premium "
        "economy. Trains are preferred for trips under four hours.",
        [fact(f"{hours}", f"From how many hours may I fly premium economy in {region}?")],
    )  # fmt: skip
    ent = r.choice([60, 75, 90, 120])
    w.add(
        "Customer entertainment",
        f"Meals with customers in {region} are limited to EUR {ent} per person; list the guests "
        "and their companies on the receipt.",
        [fact(f"{ent}", f"What is the limit per person for customer dinners in {region}?")],
    )  # fmt: skip
    days = r.choice([30, 45, 60])
    w.add(
        "Claims",
        f"Submit expense claims within {days} days of the trip with all receipts. Claims are "
        "paid with the next salary after your manager approves them.",
        [fact(f"{days}", f"Within how many days must I file an expense claim in {region}?")],
    )  # fmt: skip
    card = r.choice([2000, 3000, 5000])
    w.add(
        "Corporate card",
        f"Frequent travellers get a corporate card with a monthly limit of EUR {card}. Private "
        "use is not allowed.",
        [fact(f"{card}", f"What is the monthly limit of the corporate card in {region}?")],
    )  # fmt: skip
    taxi = r.choice([40, 50, 60, 80])
    w.add(
        "Taxis",
        f"Taxis are reimbursed up to EUR {taxi} per ride when public transport is not practical; "
        "ride-hailing apps count as taxis.",
        [fact(f"{taxi}", f"How much is reimbursed for a taxi ride in {region}?")],
    )  # fmt: skip
    return f"Travel and expenses: {region}"


def department(w: Writer, name: str) -> str:
    r = w.rng
    head = w.person()
    w.add(
        "Who we are",
        f"The {name} department is headed by {head}. It has teams in Hamburg, Rotterdam and "
        "Shanghai and works closely with operations.",
        [fact(head.split()[-1], f"Who heads the {name} department?", f"Who leads {name}?")],
    )  # fmt: skip
    mail = f"{name.lower().replace(' ', '-')}@northwind.example"
    w.add(
        "How to reach us",
        f"Write to {mail} or open a ticket in the service desk portal. We answer within one "
        "working day; urgent matters go to the on-call phone.",
        [fact(mail, f"What is the email address of {name}?", f"How do I contact {name}?")],
    )  # fmt: skip
    oncall = r.choice(["weekdays until 20:00", "around the clock", "weekends 09:00-17:00"])
    w.add(
        "On call",
        f"{name} has an on-call duty {oncall}; the number is in the intranet's phone list.",
        [fact(oncall.split()[0], f"When is {name} on call?")],
    )  # fmt: skip
    sla = r.choice([2, 3, 5, 10])
    w.add(
        "Requests",
        f"Standard requests to {name} are completed within {sla} working days. Requests need a "
        "cost centre and, above EUR 5,000, a director's approval.",
        [fact(f"{sla}", f"How long does {name} take for a standard request?")],
    )  # fmt: skip
    tool = r.choice(["Atlas ERP", "the service desk portal", "Tides dashboards", "shared drives"])
    w.add(
        "Tools",
        f"{name} works mainly in {tool}; new team members get access in their first week.",
        [fact(tool.split()[0], f"Which tool does {name} mainly use?")],
    )  # fmt: skip
    meeting = r.choice(["Monday", "Wednesday", "Friday"])
    w.add(
        "Meetings",
        f"The department meets every {meeting} at 09:30; minutes are posted in its channel.",
        [fact(meeting, f"When does the {name} department meet?")],
    )  # fmt: skip
    weeks = r.choice([2, 3, 4])
    w.add(
        "Onboarding",
        f"New colleagues in {name} follow a {weeks}-week onboarding plan with a buddy from the "
        "team.",
        [fact(f"{weeks}", f"How long is onboarding in {name}?")],
    )  # fmt: skip
    kpi = r.choice(["customer satisfaction of 4.5 out of 5", "first-time-right of 97 %",
                    "tickets closed within two days", "cost per shipment below plan"])  # fmt: skip
    w.add(
        "Goals",
        f"This year {name} is measured on {kpi}.",
        [fact(kpi.split()[0], f"What is {name} measured on?")],
    )  # fmt: skip
    escalate = w.person()
    w.add(
        "Escalation",
        f"Escalations in {name} go to {escalate}, deputy head of the department.",
        [fact(escalate.split()[-1], f"Who do I escalate to in {name}?")],
    )  # fmt: skip
    budget = r.choice([1.2, 2.5, 3.8, 4.4, 6.0])
    w.add(
        "Budget",
        f"The yearly budget of {name} is EUR {budget} million, planned in October.",
        [fact(f"{budget}", f"What is the budget of the {name} department?")],
    )  # fmt: skip
    return f"Department handbook: {name}"


def account(w: Writer, customer: str) -> str:
    r = w.rng
    manager = w.person()
    w.add(
        "Account team",
        f"The key account manager for {customer} is {manager}. The account is served from "
        f"{r.choice(['Hamburg', 'Rotterdam', 'Chicago', 'Shanghai'])}.",
        [fact(manager.split()[-1], f"Who manages the {customer} account?")],
    )  # fmt: skip
    days = r.choice([30, 45, 60, 90])
    w.add(
        "Payment terms",
        f"{customer} pays invoices within {days} days. Disputed invoices go to accounts "
        "receivable within five days of receipt.",
        [fact(f"{days}", f"What are the payment terms of {customer}?")],
    )  # fmt: skip
    sla = r.choice(["98.5", "99.0", "99.5"])
    w.add(
        "Service level",
        f"The contract with {customer} requires {sla} % of orders delivered on time; penalties "
        "apply below 97 %.",
        [fact(sla, f"What on-time delivery does the {customer} contract require?")],
    )  # fmt: skip
    goods = r.choice(["chilled food", "electronics", "pharmaceuticals", "furniture", "chemicals"])
    w.add(
        "Goods",
        f"We mainly ship {goods} for {customer}; special handling is described in the site "
        "work instructions.",
        [fact(goods.split()[0], f"What goods do we ship for {customer}?")],
    )  # fmt: skip
    renew = r.choice(["March 2026", "June 2026", "December 2026", "January 2027"])
    w.add(
        "Contract",
        f"The current contract with {customer} runs until {renew}; renewal talks start six "
        "months before.",
        [fact(renew.split()[1], f"When does the {customer} contract end?")],
    )  # fmt: skip
    edi = r.choice(["EDIFACT", "API", "CSV over SFTP"])
    w.add(
        "Order channel",
        f"{customer} sends orders by {edi}; failures are reported to the EDI gateway team.",
        [fact(edi.split()[0], f"How does {customer} send orders?")],
    )  # fmt: skip
    volume = r.randint(50, 900)
    w.add(
        "Volumes",
        f"{customer} ships about {volume} pallets a week with us, with a peak before holidays.",
        [fact(f"{volume}", f"How many pallets a week does {customer} ship?")],
    )  # fmt: skip
    review = r.choice(["quarterly", "monthly", "twice a year"])
    w.add(
        "Reviews",
        f"Business reviews with {customer} take place {review}, prepared by the account team.",
        [fact(review, f"How often do we hold business reviews with {customer}?")],
    )  # fmt: skip
    contact = w.person()
    w.add(
        "Customer contact",
        f"Our main contact at {customer} is {contact}, head of logistics.",
        [fact(contact.split()[-1], f"Who is our contact at {customer}?")],
    )  # fmt: skip
    return f"Key account: {customer}"


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def build(seed: int = SEED) -> Corpus:
    rng = random.Random(seed)
    docs: list[Doc] = []
    topics: list[Topic] = []

    def emit(kind: str, lang: str, make: Callable[..., str], *args: str) -> None:
        w = Writer(rng, lang)
        title = make(w, *args)
        doc = Doc(f"{len(docs):03d}-{kind}-{slug(title)[:40]}.md", title, lang)
        for heading, text, facts in w.sections:
            doc.sections.append((heading, text))
            topics.append(Topic(len(docs), heading, facts, lang))
        docs.append(doc)

    for city, country, cur in OFFICES_EN:
        emit("office", "en", office_en, city, country, cur)
    for city, pinyin in OFFICES_ZH:
        emit("office", "zh", office_zh, city, pinyin)
    sites = [(c, "en", c) for c, _, _ in OFFICES_EN] + [(z, "zh", p) for z, p in OFFICES_ZH]
    for i in range(60):
        city, lang, latin = sites[(i * 7) % len(sites)]
        code = f"{latin[:3].upper()}-{i + 1:02d}"
        emit("warehouse", lang, warehouse_zh if lang == "zh" else warehouse, code, city)
    names = [f"{a} {b}" for a, b in itertools.product(CODENAMES, ["One", "Two", "North", "East"])]
    for name in rng.sample(names, 100):
        emit("project", "en", project, name, rng.choice(PROJECT_KINDS))
    for name, system_slug in SYSTEMS:
        emit("it", "en", it_system, name, system_slug)
    for country, cur in COUNTRIES:
        emit("benefits", "en", benefits, country, cur)
    emit("benefits", "zh", benefits_zh)
    for region in REGIONS:
        emit("travel", "en", travel, region)
    for dept in DEPARTMENTS:
        emit("department", "en", department, dept)
    for customer in CUSTOMERS:
        emit("account", "en", account, customer)
    return Corpus(docs, topics)


# --- questions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    topic: int
    text: str
    answer: str
    lang: str


def zipf_exponent(n: int, hot: float = 0.1, share: float = 0.5) -> float:
    """The exponent s for which the hottest `hot` of `n` ranked topics (weight 1 / rank^s) get
    `share` of the draws (bisection: the share grows with s)."""
    top = max(1, round(n * hot))
    lo, hi = 0.0, 3.0
    for _ in range(60):
        s = (lo + hi) / 2
        weights = [r**-s for r in range(1, n + 1)]
        if sum(weights[:top]) / sum(weights) < share:
            lo = s
        else:
            hi = s
    return (lo + hi) / 2


class QuestionDraw:
    """Questions about a corpus, skewed towards hot topics, none asked twice."""

    def __init__(self, corpus: Corpus, *, seed: int = SEED, hot_share: float = 0.5) -> None:
        self.corpus = corpus
        self.rng = random.Random(seed + 1)
        order = list(range(len(corpus.topics)))
        random.Random(seed + 2).shuffle(order)  # rank -> topic: hot topics spread over docs
        self.ranked = order
        self.exponent = zipf_exponent(len(order), 0.1, hot_share)
        weights = [float(r**-self.exponent) for r in range(1, len(order) + 1)]
        self._cumulative: list[float] = list(itertools.accumulate(weights))
        self._asked: set[str] = set()
        self._by_doc: dict[int, list[int]] = {}
        for i, topic in enumerate(corpus.topics):
            self._by_doc.setdefault(topic.doc, []).append(i)

    def hot_share(self, hot: float = 0.1) -> float:
        top = round(len(self.ranked) * hot)
        return self._cumulative[top - 1] / self._cumulative[-1]

    def _phrase(self, topic: int, follow_up: bool) -> Question | None:
        t = self.corpus.topics[topic]
        zh = t.lang == "zh"
        openings: tuple[str, ...] = OPENINGS_ZH if zh else OPENINGS_EN
        closings: tuple[str, ...] = CLOSINGS_ZH if zh else CLOSINGS_EN
        if follow_up:
            openings = ("还有，", "另外，", "那么，") if zh else ("Thanks. And ", "And ", "Also, ")
        for _ in range(40):
            f = self.rng.choice(t.facts)
            q = self.rng.choice(f.questions)
            opening, closing = self.rng.choice(openings), self.rng.choice(closings)
            lower = opening.endswith(("And ", ", ")) and not zh
            body = q[0].lower() + q[1:] if lower and not q.startswith(("I ", "I'")) else q
            text = f"{opening}{body}{closing}"
            if text not in self._asked:
                self._asked.add(text)
                return Question(topic, text, f.answer, t.lang)
        return None  # this topic's phrasings are used up

    def first(self) -> Question:
        """A new conversation's question: a topic drawn with the skew."""
        while True:
            x = self.rng.random() * self._cumulative[-1]
            topic = self.ranked[bisect.bisect_left(self._cumulative, x)]
            q = self._phrase(topic, follow_up=False)
            if q is not None:
                return q

    def follow_up(self, previous: Question) -> Question:
        """The next question of a conversation: another section of the same document."""
        doc = self.corpus.topics[previous.topic].doc
        others = [t for t in self._by_doc[doc] if t != previous.topic]
        for topic in self.rng.sample(others, len(others)):
            q = self._phrase(topic, follow_up=True)
            if q is not None:
                return q
        return self.first()


def summary(corpus: Corpus) -> str:
    langs = {lang: sum(d.lang == lang for d in corpus.docs) for lang in ("en", "zh")}
    draw = QuestionDraw(corpus)
    return (
        f"{len(corpus.docs)} documents ({langs['en']} English, {langs['zh']} Chinese), "
        f"{len(corpus.topics)} sections, "
        f"{sum(len(d.markdown()) for d in corpus.docs) / 1e6:.2f} million characters; "
        f"questions: Zipf exponent {draw.exponent:.3f} over {len(corpus.topics)} topics, the "
        f"hottest 10 % get {draw.hot_share():.0%} of them"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--questions", type=int, default=0, help="print this many sample questions")
    args = parser.parse_args()
    corpus = build(args.seed)
    corpus.write(args.out)
    print(summary(corpus))
    draw = QuestionDraw(corpus, seed=args.seed)
    for _ in range(args.questions):
        q = draw.first()
        print(f"{q.text}  ->  {q.answer}")


if __name__ == "__main__":
    main()
