import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0005_tenant_content_audit'),
    ]

    operations = [
        migrations.CreateModel(
            name='PromptSuggestion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('title', models.CharField(help_text="The suggestion's bold first line, e.g. “Draft an email”.", max_length=60)),
                ('prompt', models.TextField(help_text='What is sent when someone clicks it (shown under the title).', max_length=2000)),
                ('position', models.PositiveSmallIntegerField(default=0, help_text='Lower comes first.')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='prompt_suggestions', to='tenants.tenant')),
            ],
            options={
                'ordering': ['tenant', 'position', 'id'],
            },
        ),
    ]
